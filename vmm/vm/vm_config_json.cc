// SPDX-License-Identifier: Apache-2.0
#include "vmm/vm/vm_config_json.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "vmm/vm/device_table.h"

namespace dsec::vm {

namespace {

constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxCmdline = 64 * 1024 - 1;
constexpr size_t kMaxDevices = 64;  // the VM refuses more than fit; this bounds parsing

const char* BootName(BootProtocolChoice b) {
  switch (b) {
    case BootProtocolChoice::kLinux64: return "linux64";
    case BootProtocolChoice::kPvh: return "pvh";
    case BootProtocolChoice::kAuto: break;
  }
  return "auto";
}

const char* ConsoleKindName(ConsoleConfig::Kind k) {
  switch (k) {
    case ConsoleConfig::Kind::kFile: return "file";
    case ConsoleConfig::Kind::kNone: return "none";
    case ConsoleConfig::Kind::kStdio: break;
  }
  return "stdio";
}

absl::Status ReadConsole(const nlohmann::json& j, const std::string& path, ConsoleConfig* c) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j, path));
  static constexpr ConsoleConfig::Kind kKinds[] = {ConsoleConfig::Kind::kStdio,
                                                   ConsoleConfig::Kind::kFile,
                                                   ConsoleConfig::Kind::kNone};
  DSEC_ASSIGN_OR_RETURN(auto kind, f.OptChoice("kind", {"stdio", "file", "none"}));
  if (kind) c->kind = kKinds[*kind];
  DSEC_ASSIGN_OR_RETURN(auto file, f.OptString("path", kMaxPath));
  if (file) c->path = *file;
  if (c->kind == ConsoleConfig::Kind::kFile && c->path.empty()) {
    return InvalidField(f.Path("path"), f.Path("path") + " is required with kind \"file\"");
  }
  DSEC_ASSIGN_OR_RETURN(auto cap, f.OptUint("cap_bytes", 0, uint64_t{1} << 50));
  if (cap) c->cap_bytes = *cap;
  DSEC_ASSIGN_OR_RETURN(auto rate, f.OptUint("rate_bytes_per_s", 0, uint64_t{1} << 40));
  if (rate) c->rate_bytes_per_s = *rate;
  DSEC_ASSIGN_OR_RETURN(auto burst, f.OptUint("burst_bytes", 0, uint64_t{1} << 40));
  if (burst) c->burst_bytes = *burst;
  return f.RejectUnknown();
}

absl::Status ReadDevices(const nlohmann::json& j, const std::string& path, virtio::DeviceSpecs* out) {
  if (!j.is_array() || j.size() > kMaxDevices) {
    return InvalidField(path, absl::StrCat(path, " must be a list of at most ", kMaxDevices, " devices"));
  }
  std::vector<std::string> names;
  for (const virtio::DeviceKind* k : DeviceKinds()) names.emplace_back(k->name());
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string item = JsonFields::ItemPath(path, i);
    DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j[i], item));
    DSEC_ASSIGN_OR_RETURN(std::string type, f.String("type", 64));
    const virtio::DeviceKind* kind = FindDeviceKind(type);
    if (kind == nullptr) {
      return InvalidField(f.Path("type"), absl::StrCat(f.Path("type"), ": unknown device type \"",
                                                       type, "\" (known: ", absl::StrJoin(names, ", "),
                                                       ")"));
    }
    DSEC_ASSIGN_OR_RETURN(std::shared_ptr<const virtio::DeviceSpec> spec, kind->FromJson(f));
    DSEC_RETURN_IF_ERROR(f.RejectUnknown());
    out->push_back(std::move(spec));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadVmConfig(JsonFields& f, VmConfig* c) {
  DSEC_ASSIGN_OR_RETURN(auto kernel, f.OptString("kernel", kMaxPath));
  if (kernel) c->kernel_path = *kernel;
  DSEC_ASSIGN_OR_RETURN(auto initrd, f.OptString("initrd", kMaxPath));
  if (initrd) c->initrd_path = *initrd;
  DSEC_ASSIGN_OR_RETURN(auto cmdline, f.OptString("cmdline", kMaxCmdline));
  if (cmdline) c->cmdline = *cmdline;
  DSEC_ASSIGN_OR_RETURN(auto mem, f.OptUint("mem_mib", 16, uint64_t{1} << 20));
  if (mem) c->mem_mib = *mem;
  DSEC_ASSIGN_OR_RETURN(auto vcpus, f.OptUint("vcpus", 1, 64));
  if (vcpus) c->vcpus = static_cast<uint32_t>(*vcpus);
  static constexpr BootProtocolChoice kBoots[] = {
      BootProtocolChoice::kAuto, BootProtocolChoice::kLinux64, BootProtocolChoice::kPvh};
  DSEC_ASSIGN_OR_RETURN(auto boot, f.OptChoice("boot", {"auto", "linux64", "pvh"}));
  if (boot) c->boot = kBoots[*boot];
  DSEC_ASSIGN_OR_RETURN(auto pit, f.OptChoice("pit", {"user", "kernel"}));
  if (pit) c->pit = *pit == 1 ? PitChoice::kKernel : PitChoice::kUser;
  DSEC_ASSIGN_OR_RETURN(auto acpi, f.OptBool("acpi"));
  if (acpi) c->acpi = *acpi;
  DSEC_ASSIGN_OR_RETURN(auto qos, f.OptEnum("qos", {"ls", "be"}));
  if (qos) {
    DSEC_ASSIGN_OR_RETURN(sched::QosClass q, sched::ParseQosClass(*qos));
    c->qos = q;
  }
  DSEC_ASSIGN_OR_RETURN(auto timeout, f.OptUint("timeout_ms", 0, uint64_t{1} << 40));
  if (timeout) c->timeout_ms = *timeout;
  if (const nlohmann::json* console = f.Raw("console")) {
    DSEC_RETURN_IF_ERROR(ReadConsole(*console, f.Path("console"), &c->console));
  }
  if (const nlohmann::json* devices = f.Raw("devices")) {
    virtio::DeviceSpecs specs;
    DSEC_RETURN_IF_ERROR(ReadDevices(*devices, f.Path("devices"), &specs));
    c->devices = std::move(specs);
  }
  return absl::OkStatus();
}

absl::StatusOr<VmConfig> VmConfigFromJson(const nlohmann::json& j) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(j));
  VmConfig c;
  DSEC_RETURN_IF_ERROR(ReadVmConfig(f, &c));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  return c;
}

nlohmann::json VmConfigToJson(const VmConfig& c) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : c.devices) devices.push_back(d->ToJson());
  return nlohmann::json{
      {"kernel", c.kernel_path},
      {"initrd", c.initrd_path ? nlohmann::json(*c.initrd_path) : nlohmann::json(nullptr)},
      {"cmdline", c.cmdline},
      {"mem_mib", c.mem_mib},
      {"vcpus", c.vcpus},
      {"boot", BootName(c.boot)},
      {"pit", c.pit == PitChoice::kKernel ? "kernel" : "user"},
      {"acpi", c.acpi},
      {"qos", c.qos ? nlohmann::json(std::string(sched::QosClassName(*c.qos))) : nlohmann::json(nullptr)},
      {"timeout_ms", c.timeout_ms},
      {"console",
       {{"kind", ConsoleKindName(c.console.kind)},
        {"path", c.console.path},
        {"cap_bytes", c.console.cap_bytes},
        {"rate_bytes_per_s", c.console.rate_bytes_per_s},
        {"burst_bytes", c.console.burst_bytes}}},
      {"devices", devices},
  };
}

}  // namespace dsec::vm
