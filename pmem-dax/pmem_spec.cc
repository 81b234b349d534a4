// SPDX-License-Identifier: Apache-2.0
#include "pmem-dax/pmem_spec.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "devices/pmem/pmem_backend.h"
#include "platform/bus/bus.h"
#include "pmem-dax/layer_mapping.h"
#include "pmem-dax/readonly_write_sink.h"

namespace dsec::pmem {

namespace {

class PmemKind final : public virtio::DeviceKind {
 public:
  std::string_view name() const override { return "pmem"; }
  std::span<const virtio::DeviceFlag> flags() const override { return kFlags; }
  // fstat (the size check) is on every thread's list.
  virtio::HostCalls host_calls() const override { return {kCalls, {}}; }
  const std::type_info& control_type() const override { return typeid(PmemLayer); }
  absl::StatusOr<std::shared_ptr<const virtio::DeviceSpec>> FromJson(
      JsonFields& f) const override {
    DSEC_ASSIGN_OR_RETURN(virtio::PathWithMode p, virtio::ReadPathFields(f));
    return PmemSpec::Make(std::move(p.path), p.read_only);
  }
  absl::StatusOr<virtio::DeviceSpecs> FromFlags(const virtio::DeviceFlagValues& values) const override {
    DSEC_ASSIGN_OR_RETURN(std::vector<virtio::PathWithMode> paths, virtio::PathFlags(values, "pmem"));
    virtio::DeviceSpecs out;
    for (virtio::PathWithMode& p : paths) out.push_back(PmemSpec::Make(std::move(p.path), p.read_only));
    return out;
  }

 private:
  static constexpr virtio::DeviceFlag kFlags[] = {
      {"pmem", "PATH[,ro]",
       "virtio-pmem layer mapped into the guest (DAX) (repeatable; ro: read-only memslot, guest "
       "writes refused)",
       true}};
  static constexpr virtio::SyscallUse kCalls[] = {
      {virtio::HostThread::kEventLoop, "fdatasync",
       "VIRTIO_PMEM_REQ_TYPE_FLUSH: the guest's fsync reaches the layer file"}};
};

}  // namespace

const virtio::DeviceKind& PmemDeviceKind() {
  static const PmemKind kind;
  return kind;
}

const virtio::DeviceKind& PmemSpec::kind() const { return PmemDeviceKind(); }

nlohmann::json PmemSpec::ToJson() const {
  return {{"type", "pmem"}, {"path", path}, {"read_only", read_only}};
}

uint64_t PmemLayer::refused_writes() const { return sink_ ? sink_->refused_writes() : 0; }

absl::StatusOr<virtio::BuiltDevice> PmemSpec::Build(const virtio::DeviceEnv& env) const {
  if (env.address_space == nullptr || env.mmio_bus == nullptr) {
    return absl::InvalidArgumentError("pmem: the VM offers no device memory");
  }
  // The mapping is the first resource, so it is released last: after the
  // memslot and the bus claim that point into it.
  auto mapping = LayerMapping::Create(path, read_only);
  if (!mapping.ok()) return Annotate(mapping.status(), absl::StrCat("pmem ", path));
  auto m = std::make_shared<LayerMapping>(std::move(*mapping));
  auto gpa = env.address_space->AllocateWindow(m->region_size());
  if (!gpa.ok()) return Annotate(gpa.status(), absl::StrCat("pmem ", path));
  const std::string name = absl::StrCat("virtio-pmem", env.index);
  virtio::BuiltDevice b;
  b.name = name;
  b.resources.push_back(m);
  auto slot = env.address_space->Map(*gpa, m->region_size(), m->host_addr(), m->read_only());
  if (!slot.ok()) return Annotate(slot.status(), absl::StrCat("pmem ", path, ": memslot"));
  b.resources.push_back(std::shared_ptr<virtio::GuestMapping>(std::move(*slot)));
  std::shared_ptr<ReadOnlyWriteSink> sink;
  if (m->read_only()) {
    // Guest writes to a read-only memslot exit as MMIO: refused and counted.
    sink = std::make_shared<ReadOnlyWriteSink>(name, m->host_addr(), m->region_size());
    DSEC_ASSIGN_OR_RETURN(bus::BusClaim claim,
                          bus::BusClaim::Insert(env.mmio_bus, sink, *gpa, m->region_size()));
    b.resources.push_back(std::make_shared<bus::BusClaim>(std::move(claim)));
  }
  DSEC_ASSIGN_OR_RETURN(std::unique_ptr<devices::FilePmemBackend> backend,
                        devices::FilePmemBackend::Create(m->fd(), m->file_size()));
  devices::PmemOptions po;
  po.start = *gpa;
  po.size = m->region_size();
  po.read_only = m->read_only();
  DSEC_ASSIGN_OR_RETURN(std::shared_ptr<devices::PmemDevice> device,
                        devices::PmemDevice::Create(std::move(backend), po));
  b.control = std::shared_ptr<const PmemLayer>(
      std::make_shared<PmemLayer>(path, *gpa, m->region_size(), device, sink));
  b.device = std::move(device);
  return b;
}

}  // namespace dsec::pmem
