// SPDX-License-Identifier: Apache-2.0
// Fuzzes ParsePmemRequest with arbitrary guest memory and chains.
#include <cstddef>
#include <cstdint>

#include "devices/pmem/pmem_request.h"
#include "devices/virtio/fuzz/fuzz_chain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dsec::virtio::fuzz;
  static auto mem = std::move(*dsec::memory::FakeGuestMemory::Create({{0, kFuzzMemSize}}));
  FuzzBytes in(data, size);
  dsec::virtio::DescriptorChain chain = TakeChain(in, *mem);
  (void)dsec::devices::ParsePmemRequest(*mem, chain);
  return 0;
}
