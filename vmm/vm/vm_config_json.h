// SPDX-License-Identifier: Apache-2.0
// VmConfig as JSON: what `dsec-monitor --config FILE` reads and the microvm
// tier writes. Every field of VmConfig has a key; devices are a list of
// {"type": KIND, ...} objects whose kinds come from the device table.
//
//   {"kernel": "/k/vmlinux", "initrd": null, "cmdline": "console=ttyS0",
//    "mem_mib": 256, "vcpus": 1, "boot": "auto", "pit": "user", "acpi": true,
//    "qos": null, "timeout_ms": 0,
//    "console": {"kind": "file", "path": "/s/console.log", "cap_bytes": 1048576,
//                "rate_bytes_per_s": 262144, "burst_bytes": 65536},
//    "devices": [{"type": "pmem", "path": "/i/root.erofs", "read_only": true},
//                {"type": "vsock", "guest_cid": 3, "socket": "/s/vsock.sock"}]}
//
// Absent keys keep their defaults; unknown keys are refused; every error is
// an InvalidArgument naming the field ("devices[1].socket").
#pragma once

#include "absl/status/statusor.h"
#include "base/json_fields.h"
#include "nlohmann/json.hpp"
#include "vmm/vm/vm_config.h"

namespace dsec::vm {

// Reads the VM's keys from `fields` into `config` (keys not read stay for
// the caller, which calls fields.RejectUnknown() once it read its own).
absl::Status ReadVmConfig(JsonFields& fields, VmConfig* config);

// A whole VmConfig object (unknown keys refused).
absl::StatusOr<VmConfig> VmConfigFromJson(const nlohmann::json& j);

// Every field, devices included, as ReadVmConfig reads them back.
nlohmann::json VmConfigToJson(const VmConfig& config);

}  // namespace dsec::vm
