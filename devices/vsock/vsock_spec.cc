// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_spec.h"

#include <sys/ioctl.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "devices/vsock/unix_backend.h"
#include "devices/vsock/vsock_device.h"

namespace dsec::devices {

namespace {

// CIDs 0-2 are reserved (hypervisor, local, host); 0xffffffff is "any".
constexpr uint64_t kMinCid = 3;
constexpr uint64_t kMaxCid = 0xfffffffeu;
constexpr size_t kMaxSocketPath = 107;  // sun_path

class VsockKind final : public virtio::DeviceKind {
 public:
  std::string_view name() const override { return "vsock"; }
  std::span<const virtio::DeviceFlag> flags() const override { return kFlags; }
  virtio::HostCalls host_calls() const override { return {kCalls, kIoctls}; }
  absl::StatusOr<std::shared_ptr<const virtio::DeviceSpec>> FromJson(
      JsonFields& f) const override {
    auto spec = std::make_shared<VsockSpec>();
    DSEC_ASSIGN_OR_RETURN(auto cid, f.OptUint("guest_cid", kMinCid, kMaxCid));
    spec->guest_cid = static_cast<uint32_t>(cid.value_or(3));
    DSEC_ASSIGN_OR_RETURN(spec->socket_path, f.String("socket", kMaxSocketPath));
    if (spec->socket_path.empty()) return InvalidField(f.Path("socket"), f.Path("socket") + " is empty");
    return spec;
  }
  absl::StatusOr<virtio::DeviceSpecs> FromFlags(const virtio::DeviceFlagValues& values) const override {
    virtio::DeviceSpecs out;
    auto it = values.find("vsock");
    if (it == values.end()) return out;
    if (it->second.size() > 1) return absl::InvalidArgumentError("--vsock: at most one vsock device per VM");
    for (const std::string& arg : it->second) {
      const size_t comma = arg.find(',');
      uint64_t cid = 0;
      if (comma == std::string::npos || comma + 1 == arg.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--vsock ", arg, ": expected CID,SOCKET"));
      }
      if (!absl::SimpleAtoi(absl::string_view(arg).substr(0, comma), &cid) || cid < kMinCid ||
          cid > kMaxCid) {
        return absl::InvalidArgumentError(
            absl::StrCat("--vsock ", arg, ": guest CID must be a number from 3 to 4294967294"));
      }
      auto spec = std::make_shared<VsockSpec>();
      spec->guest_cid = static_cast<uint32_t>(cid);
      spec->socket_path = arg.substr(comma + 1);
      out.push_back(std::move(spec));
    }
    return out;
  }

 private:
  static constexpr virtio::DeviceFlag kFlags[] = {
      {"vsock", "CID,SOCKET",
       "virtio-vsock (host clients connect to SOCKET and send 'CONNECT <port>\\n'; guest "
       "connections to port P reach SOCKET_P)",
       false}};
  static constexpr virtio::HostThread kLoop = virtio::HostThread::kEventLoop;
  static constexpr virtio::SyscallUse kCalls[] = {
      {kLoop, "socket", "a guest connection to a host unix socket", true},
      {kLoop, "connect", "the same"},
      {kLoop, "accept4", "host connections to a guest port"},
      {kLoop, "getsockopt", "the result of a non-blocking connect"},
      {kLoop, "sendto", "stream data"},
      {kLoop, "recvfrom", "stream data"},
      {kLoop, "sendmsg", "stream data"},
      {kLoop, "recvmsg", "stream data"},
      {kLoop, "readv", "stream data"},
      {kLoop, "shutdown", "half-close"},
  };
  static constexpr virtio::IoctlUse kIoctls[] = {
      {kLoop, FIONREAD, "bytes waiting on a host socket"},
      {kLoop, FIONBIO, "non-blocking host sockets"},
  };
};

}  // namespace

const virtio::DeviceKind& VsockDeviceKind() {
  static const VsockKind kind;
  return kind;
}

const virtio::DeviceKind& VsockSpec::kind() const { return VsockDeviceKind(); }

nlohmann::json VsockSpec::ToJson() const {
  return {{"type", "vsock"}, {"guest_cid", guest_cid}, {"socket", socket_path}};
}

absl::StatusOr<virtio::BuiltDevice> VsockSpec::Build(const virtio::DeviceEnv& env) const {
  if (env.index > 0) return absl::InvalidArgumentError("at most one vsock device per VM");
  UnixVsockBackendOptions o;
  o.path = socket_path;
  o.guest_cid = guest_cid;
  auto backend = UnixVsockBackend::Create(env.loop, o);
  if (!backend.ok()) return Annotate(backend.status(), absl::StrCat("vsock ", socket_path));
  std::shared_ptr<UnixVsockBackend> shared = std::move(*backend);
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<VsockDevice> dev, VsockDevice::Create(guest_cid, shared.get()));
  virtio::BuiltDevice b;
  b.name = "virtio-vsock";
  b.device = std::move(dev);
  b.resources.push_back(std::move(shared));
  return b;
}

}  // namespace dsec::devices
