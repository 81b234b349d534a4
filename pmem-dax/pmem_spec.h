// SPDX-License-Identifier: Apache-2.0
// virtio-pmem in a VM configuration: {"type": "pmem", "path": "...",
// "read_only": true} (a layer image mapped into the guest with DAX); on the
// command line `--pmem PATH[,ro]` (repeatable). Its BuiltDevice::control
// holds a std::shared_ptr<const PmemLayer>: the window the guest sees and
// its counters (AsPmemLayer).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "devices/pmem/pmem_device.h"
#include "devices/virtio/device_spec.h"

namespace dsec::pmem {

struct PmemSpec final : public virtio::DeviceSpec {
  std::string path;
  bool read_only = false;

  static std::shared_ptr<const PmemSpec> Make(std::string path, bool read_only) {
    auto s = std::make_shared<PmemSpec>();
    s->path = std::move(path);
    s->read_only = read_only;
    return s;
  }

  const virtio::DeviceKind& kind() const override;
  nlohmann::json ToJson() const override;
  absl::StatusOr<virtio::BuiltDevice> Build(const virtio::DeviceEnv& env) const override;
};

const virtio::DeviceKind& PmemDeviceKind();

class ReadOnlyWriteSink;

// One mapped layer, as the VM's owner sees it. Any thread.
class PmemLayer {
 public:
  PmemLayer(std::string path, uint64_t gpa, uint64_t size, std::shared_ptr<devices::PmemDevice> device,
            std::shared_ptr<ReadOnlyWriteSink> sink)
      : path_(std::move(path)), gpa_(gpa), size_(size), device_(std::move(device)), sink_(std::move(sink)) {}
  const std::string& path() const { return path_; }
  uint64_t gpa() const { return gpa_; }
  uint64_t size() const { return size_; }  // the window (file size rounded up to 2 MiB)
  const devices::PmemMetrics& metrics() const { return device_->metrics(); }
  // Guest writes refused on a read-only layer.
  uint64_t refused_writes() const;

 private:
  std::string path_;
  uint64_t gpa_;
  uint64_t size_;
  std::shared_ptr<devices::PmemDevice> device_;
  std::shared_ptr<ReadOnlyWriteSink> sink_;
};

inline const PmemLayer* AsPmemLayer(const std::any* control) {
  if (control == nullptr) return nullptr;
  auto* p = std::any_cast<std::shared_ptr<const PmemLayer>>(control);
  return p != nullptr ? p->get() : nullptr;
}

}  // namespace dsec::pmem
