// SPDX-License-Identifier: Apache-2.0
// Fuzzes the init's parser of exec requests (init_protocol.h): the init
// runs inside the sandbox and trusts the bytes it reads no more than guest
// input. The first sizeof(ExecRequestHeader) bytes are the header, the
// rest the body. The parser must never read outside the body or the
// slots, and whatever it accepts must re-encode to the same header (but
// its seq, which the runtime sets per request, not the encoder) and body.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/container/init_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsec::container;
  ExecRequestHeader h;
  if (size < sizeof(h)) return 0;
  std::memcpy(&h, data, sizeof(h));
  // Half the inputs get a consistent magic and length, so that the string
  // walk is reached often.
  if (h.flags & 0x80000000u) {
    h.magic = kExecRequestMagic;
    h.body_bytes = static_cast<uint32_t>(size - sizeof(h));
    h.flags &= kExecKillGroupOnExit;
  }
  // Exactly sized heap copies, so that ASan sees any overrun.
  std::vector<char> body(data + sizeof(h), data + size);
  size_t nslots = ExecRequestPointerSlots(h);
  if (nslots > body.size() + 3) nslots = body.size() + 3;  // what the init maps at most
  std::vector<char*> slots(nslots);
  ParsedExecRequest r;
  if (!ParseExecRequest(h, body.data(), body.size(), slots.data(), slots.size(), &r)) return 0;
  ExecSpec spec;
  for (char* const* a = r.argv; *a != nullptr; ++a) spec.argv.emplace_back(*a);
  for (char* const* e = r.envp; *e != nullptr; ++e) spec.env.emplace_back(*e);
  for (uint32_t i = 0; i < r.npaths; ++i) spec.exec_paths.emplace_back(r.paths[i]);
  spec.cwd = r.cwd;
  spec.uid = h.uid;
  spec.gid = h.gid;
  spec.kill_group_on_exit = (h.flags & kExecKillGroupOnExit) != 0;
  ExecRequestHeader again;
  auto encoded = EncodeExecRequest(spec, &again);
  again.seq = h.seq;
  if (!encoded.ok() || std::memcmp(&again, &h, sizeof(h)) != 0 ||
      *encoded != std::string(data + sizeof(h), data + size)) {
    __builtin_trap();
  }
  return 0;
}
