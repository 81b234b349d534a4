// SPDX-License-Identifier: Apache-2.0
// A virtio device as a VM configuration names it: each device folder
// contributes its typed spec (one DeviceSpec subclass), the JSON and
// command-line forms of that spec (a DeviceKind), and the builder that turns
// it into a running device given what the VM offers (DeviceEnv). The VM
// lists the kinds in one table (vmm/vm/device_table.cc); adding a device
// touches its folder and that one line.
#pragma once

#include <any>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "absl/status/statusor.h"
#include "base/json_fields.h"
#include "devices/virtio/virtio_device.h"
#include "nlohmann/json.hpp"

namespace dsec {
class EventLoop;
}  // namespace dsec
namespace dsec::bus {
class Bus;
}  // namespace dsec::bus
namespace dsec::memory {
class MemfdGuestMemory;
}  // namespace dsec::memory

namespace dsec::virtio {

// One host range mapped into the guest physical address space (a KVM
// memslot, but the device does not know that). Destruction unmaps it.
class GuestMapping {
 public:
  virtual ~GuestMapping() = default;
};

// What a device may ask of the VM's address space: device memory windows
// (virtio-pmem) placed after guest RAM and mapped from host memory.
class GuestAddressSpace {
 public:
  virtual ~GuestAddressSpace() = default;
  // A free window of `size` bytes (a 2 MiB multiple) after guest RAM;
  // ResourceExhausted when none is left. Windows are never reused.
  virtual absl::StatusOr<uint64_t> AllocateWindow(uint64_t size) = 0;
  // Maps [host, host + size) at `gpa`. A read-only mapping's guest writes
  // reach whatever claims the range on the MMIO bus.
  virtual absl::StatusOr<std::unique_ptr<GuestMapping>> Map(uint64_t gpa, uint64_t size, void* host,
                                                            bool read_only) = 0;
};

// What the VM gives a device's builder. Everything outlives the device.
struct DeviceEnv {
  const memory::MemfdGuestMemory* memory = nullptr;  // guest RAM (memfd-backed)
  EventLoop* loop = nullptr;                         // the device event loop
  bus::Bus* mmio_bus = nullptr;                      // for ranges a device claims itself
  GuestAddressSpace* address_space = nullptr;
  size_t index = 0;  // this device's position among the devices of its kind
};

// A device built from its spec, ready to be put behind a transport.
struct BuiltDevice {
  std::string name;                       // "virtio-blk0": logs and metrics
  std::shared_ptr<VirtioDevice> device;   // what the transport drives
  // Backends, mappings and bus claims the device uses: destroyed after its
  // transport (which resets the device), in reverse order of creation.
  std::vector<std::shared_ptr<void>> resources;
  // What the VM's owner may use while the VM runs (the balloon's
  // BalloonControl, a pmem layer's window and counters): a std::shared_ptr
  // of the kind's control_type(), found by that type
  // (vm::VirtioDevices::Find<T>). Empty for kinds without one.
  std::any control;
};

class DeviceKind;

// One device's configuration. Immutable once parsed; shared by copies of a
// VM configuration.
class DeviceSpec {
 public:
  virtual ~DeviceSpec() = default;
  virtual const DeviceKind& kind() const = 0;
  // {"type": kind().name(), ...every field}: what FromJson reads back.
  virtual nlohmann::json ToJson() const = 0;
  virtual absl::StatusOr<BuiltDevice> Build(const DeviceEnv& env) const = 0;
};

using DeviceSpecs = std::vector<std::shared_ptr<const DeviceSpec>>;

// A command-line flag of a kind: `--name VALUE` (or `--name` alone when
// !takes_value), repeatable unless said otherwise.
struct DeviceFlag {
  std::string_view name;
  std::string_view value_name;  // "PATH[,ro]"; "" for a flag without a value
  std::string_view help;
  bool repeatable = true;
};

// The values given for one kind's flags, in command-line order per flag; a
// flag without a value appears once per use with an empty value.
using DeviceFlagValues = std::map<std::string, std::vector<std::string>, std::less<>>;

// The monitor threads a device's host side runs on. The monitor filters
// each kind of thread with its own seccomp list (vmm/jail).
enum class HostThread {
  kEventLoop,  // queue notifications, back-end I/O, activation and reset
  kVcpu,       // register accesses (the exits)
  kMain,       // teardown once the guest stopped
};

// A system call a device's host side makes once the guest runs (what it
// does while the VM is built needs nothing here), and why: the monitor's
// filter for that thread allows it only in VMs that have the device.
struct SyscallUse {
  HostThread thread = HostThread::kEventLoop;
  std::string_view name;  // as libseccomp names it: "pwritev2"
  std::string_view why;
  bool unix_socket_only = false;  // socket(): AF_UNIX only
};
// An ioctl request a device's host side issues once the guest runs.
struct IoctlUse {
  HostThread thread = HostThread::kEventLoop;
  unsigned long request = 0;
  std::string_view why;
};
struct HostCalls {
  std::span<const SyscallUse> syscalls;
  std::span<const IoctlUse> ioctls;
};

// A device kind: its name in JSON ("type"), the functions that make its
// specs, and what its host side asks of the monitor's jail. Kinds are
// constants of their device folder, listed by the VM.
class DeviceKind {
 public:
  virtual ~DeviceKind() = default;
  virtual std::string_view name() const = 0;
  virtual std::span<const DeviceFlag> flags() const = 0;
  // The calls beyond every thread's common set (memory, locks, clocks,
  // read/write/close, eventfds, timerfds, getrandom, madvise, fstat) that
  // this kind's back-ends make; a kind that needs none returns {}.
  virtual HostCalls host_calls() const = 0;
  // The type T of what this kind's BuiltDevice::control holds (a
  // std::shared_ptr<T>), typeid(void) for none: the VM's owner finds a
  // device by what it offers (the reclaim controller needs a
  // BalloonControl) without naming its kind.
  virtual const std::type_info& control_type() const { return typeid(void); }
  // Reads the fields of one "devices" entry (the "type" key already read);
  // unknown fields are refused by the caller afterwards. Errors name the
  // field (JsonFields).
  virtual absl::StatusOr<std::shared_ptr<const DeviceSpec>> FromJson(JsonFields& fields) const = 0;
  // The specs this kind's flags describe (zero or more), in order.
  // InvalidArgument naming the flag for bad values.
  virtual absl::StatusOr<DeviceSpecs> FromFlags(const DeviceFlagValues& values) const = 0;
};

// "PATH" or "PATH,ro": the path and whether ",ro" ended it (a path that
// contains a comma is taken whole unless it ends in ",ro").
struct PathWithMode {
  std::string path;
  bool read_only = false;
};
absl::StatusOr<PathWithMode> ParsePathWithMode(std::string_view flag, std::string_view arg);
// Every value of `flag` in `values`, parsed as PATH[,ro].
absl::StatusOr<std::vector<PathWithMode>> PathFlags(const DeviceFlagValues& values,
                                                    std::string_view flag);
// The fields of a device backed by one file: "path" (required, non-empty)
// and "read_only" (default false).
absl::StatusOr<PathWithMode> ReadPathFields(JsonFields& fields);

}  // namespace dsec::virtio
