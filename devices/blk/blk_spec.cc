// SPDX-License-Identifier: Apache-2.0
#include "devices/blk/blk_spec.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "devices/blk/blk_device.h"
#include "devices/blk/disk_image.h"

namespace dsec::devices {

namespace {

class BlkKind final : public virtio::DeviceKind {
 public:
  std::string_view name() const override { return "disk"; }
  std::span<const virtio::DeviceFlag> flags() const override { return kFlags; }
  virtio::HostCalls host_calls() const override { return {kCalls, {}}; }
  absl::StatusOr<std::shared_ptr<const virtio::DeviceSpec>> FromJson(
      JsonFields& f) const override {
    DSEC_ASSIGN_OR_RETURN(virtio::PathWithMode p, virtio::ReadPathFields(f));
    return BlkSpec::Make(std::move(p.path), p.read_only);
  }
  absl::StatusOr<virtio::DeviceSpecs> FromFlags(const virtio::DeviceFlagValues& values) const override {
    DSEC_ASSIGN_OR_RETURN(std::vector<virtio::PathWithMode> paths, virtio::PathFlags(values, "disk"));
    virtio::DeviceSpecs out;
    for (virtio::PathWithMode& p : paths) out.push_back(BlkSpec::Make(std::move(p.path), p.read_only));
    return out;
  }

 private:
  static constexpr virtio::DeviceFlag kFlags[] = {
      {"disk", "PATH[,ro]", "virtio-blk disk on a raw image file (repeatable)", true}};
  static constexpr virtio::HostThread kLoop = virtio::HostThread::kEventLoop;
  static constexpr virtio::SyscallUse kCalls[] = {
      {kLoop, "readv", "image reads"},
      {kLoop, "pread64", "image reads"},
      {kLoop, "pwrite64", "image writes"},
      {kLoop, "preadv", "image reads (sync back-end)"},
      {kLoop, "pwritev", "image writes (sync back-end)"},
      {kLoop, "preadv2", "image reads"},
      {kLoop, "pwritev2", "image writes"},
      {kLoop, "fsync", "VIRTIO_BLK_T_FLUSH"},
      {kLoop, "fdatasync", "VIRTIO_BLK_T_FLUSH"},
      {kLoop, "fallocate", "discard and write-zeroes (hole punching)"},
      {kLoop, "io_uring_setup", "the io_uring back-end, made when the guest starts the disk"},
      {kLoop, "io_uring_register", "its eventfd and buffers"},
      {kLoop, "io_uring_enter", "its submissions"},
      {virtio::HostThread::kVcpu, "io_uring_setup",
       "the io_uring back-end, made when the guest sets DRIVER_OK"},
      {virtio::HostThread::kVcpu, "io_uring_register", "its eventfd"},
      {virtio::HostThread::kVcpu, "io_uring_enter", "its first submissions"},
      {virtio::HostThread::kMain, "io_uring_enter",
       "the io_uring back-end's teardown (waits for requests in flight)"},
  };
};

}  // namespace

const virtio::DeviceKind& BlkDeviceKind() {
  static const BlkKind kind;
  return kind;
}

const virtio::DeviceKind& BlkSpec::kind() const { return BlkDeviceKind(); }

nlohmann::json BlkSpec::ToJson() const {
  return {{"type", "disk"}, {"path", path}, {"read_only", read_only}};
}

absl::StatusOr<virtio::BuiltDevice> BlkSpec::Build(const virtio::DeviceEnv& env) const {
  auto image = DiskImage::Open(path, read_only);
  if (!image.ok()) return Annotate(image.status(), absl::StrCat("disk ", path));
  BlkDeviceConfig c;
  c.serial = absl::StrCat("dsec-disk", env.index);
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<BlkDevice> dev, BlkDevice::Create(std::move(*image), c));
  virtio::BuiltDevice b;
  b.name = absl::StrCat("virtio-blk", env.index);
  b.device = std::move(dev);
  return b;
}

}  // namespace dsec::devices
