// SPDX-License-Identifier: Apache-2.0
#include "devices/virtio/virtqueue_builder.h"

#include "base/status.h"

namespace dsec::virtio {

namespace {
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

VirtQueueBuilder::VirtQueueBuilder(const memory::GuestMemory& memory, uint64_t base, uint16_t size,
                                   uint64_t area_bytes)
    : memory_(memory), size_(size) {
  desc_addr_ = AlignUp(base, kDescAlign);
  avail_addr_ = desc_addr_ + DescTableBytes(size);
  used_addr_ = AlignUp(avail_addr_ + AvailRingBytes(size), 4096);
  data_next_ = AlignUp(used_addr_ + UsedRingBytes(size), 4096);
  data_start_ = data_next_;
  data_end_ = base + area_bytes;
  DSEC_CHECK(data_next_ < data_end_);
  DSEC_CHECK(memory_.IsValidRange(base, area_bytes));
  DSEC_CHECK_OK(memory_.Fill(base, 0, data_next_ - base));
}

void VirtQueueBuilder::Configure(Queue& queue) const {
  queue.set_size(size_);
  queue.set_desc_addr(desc_addr_);
  queue.set_avail_addr(avail_addr_);
  queue.set_used_addr(used_addr_);
  queue.set_ready(true);
}

Queue VirtQueueBuilder::MakeQueue(uint64_t features) const {
  Queue queue(size_);
  Configure(queue);
  DSEC_CHECK_OK(queue.Activate(memory_, features));
  return queue;
}

uint64_t VirtQueueBuilder::Alloc(uint64_t len, uint64_t align) {
  uint64_t gpa = AlignUp(data_next_, align);
  if (gpa + len > data_end_) gpa = AlignUp(data_start_, align);  // wrap around
  DSEC_CHECK(gpa + len <= data_end_);
  data_next_ = gpa + len;
  return gpa;
}

uint16_t VirtQueueBuilder::AllocDesc() {
  uint16_t index = next_desc_;
  next_desc_ = static_cast<uint16_t>((next_desc_ + 1) % size_);
  return index;
}

std::vector<VirtqDesc> VirtQueueBuilder::BufferDescs(
    const std::vector<std::vector<uint8_t>>& readable, const std::vector<uint32_t>& writable_lens,
    AddedChain& added) {
  std::vector<VirtqDesc> descs;
  for (const auto& bytes : readable) {
    uint64_t gpa = Alloc(bytes.size());
    WriteBytes(gpa, bytes);
    descs.push_back({gpa, static_cast<uint32_t>(bytes.size()), 0, 0});
    added.readable.push_back({gpa, static_cast<uint32_t>(bytes.size())});
  }
  for (uint32_t len : writable_lens) {
    uint64_t gpa = Alloc(len);
    DSEC_CHECK_OK(memory_.Fill(gpa, 0, len));
    descs.push_back({gpa, len, kDescFlagWrite, 0});
    added.writable.push_back({gpa, len});
  }
  DSEC_CHECK(!descs.empty());
  return descs;
}

VirtQueueBuilder::AddedChain VirtQueueBuilder::AddChain(
    const std::vector<std::vector<uint8_t>>& readable, const std::vector<uint32_t>& writable_lens) {
  AddedChain added;
  std::vector<VirtqDesc> descs = BufferDescs(readable, writable_lens, added);
  DSEC_CHECK(descs.size() <= size_);
  std::vector<uint16_t> indices;
  for (size_t i = 0; i < descs.size(); ++i) indices.push_back(AllocDesc());
  for (size_t i = 0; i < descs.size(); ++i) {
    if (i + 1 < descs.size()) {
      descs[i].flags |= kDescFlagNext;
      descs[i].next = indices[i + 1];
    }
    SetDesc(indices[i], descs[i]);
  }
  added.head = indices[0];
  PushAvail(added.head);
  return added;
}

VirtQueueBuilder::AddedChain VirtQueueBuilder::AddIndirectChain(
    const std::vector<std::vector<uint8_t>>& readable, const std::vector<uint32_t>& writable_lens) {
  AddedChain added;
  std::vector<VirtqDesc> descs = BufferDescs(readable, writable_lens, added);
  for (size_t i = 0; i + 1 < descs.size(); ++i) {
    descs[i].flags |= kDescFlagNext;
    descs[i].next = static_cast<uint16_t>(i + 1);
  }
  uint64_t table = Alloc(kDescSize * descs.size(), kDescSize);
  WriteTable(table, descs);
  added.head = AllocDesc();
  SetDesc(added.head,
          {table, static_cast<uint32_t>(kDescSize * descs.size()), kDescFlagIndirect, 0});
  PushAvail(added.head);
  return added;
}

void VirtQueueBuilder::SetDesc(uint16_t index, const VirtqDesc& desc) {
  DSEC_CHECK(index < size_);
  DSEC_CHECK_OK(memory_.WriteObj(desc_addr_ + kDescSize * index, desc));
}

void VirtQueueBuilder::WriteTable(uint64_t gpa, const std::vector<VirtqDesc>& descs) {
  for (size_t i = 0; i < descs.size(); ++i) {
    DSEC_CHECK_OK(memory_.WriteObj(gpa + kDescSize * i, descs[i]));
  }
}

void VirtQueueBuilder::PushAvail(uint16_t head) {
  uint16_t idx = avail_idx();
  DSEC_CHECK_OK(memory_.WriteObj<uint16_t>(avail_addr_ + 4 + 2ull * (idx % size_), head));
  SetAvailIdx(static_cast<uint16_t>(idx + 1));
}

void VirtQueueBuilder::SetAvailIdx(uint16_t idx) {
  DSEC_CHECK_OK(memory_.WriteObj<uint16_t>(avail_addr_ + 2, idx));
}

uint16_t VirtQueueBuilder::avail_idx() const {
  return memory_.ReadObj<uint16_t>(avail_addr_ + 2).value();
}

void VirtQueueBuilder::SetAvailFlags(uint16_t flags) {
  DSEC_CHECK_OK(memory_.WriteObj<uint16_t>(avail_addr_, flags));
}

void VirtQueueBuilder::SetUsedEvent(uint16_t value) {
  DSEC_CHECK_OK(memory_.WriteObj<uint16_t>(avail_addr_ + 4 + 2ull * size_, value));
}

uint16_t VirtQueueBuilder::used_idx() const {
  return memory_.ReadObj<uint16_t>(used_addr_ + 2).value();
}

uint16_t VirtQueueBuilder::used_flags() const {
  return memory_.ReadObj<uint16_t>(used_addr_).value();
}

VirtqUsedElem VirtQueueBuilder::used(uint16_t i) const {
  return memory_.ReadObj<VirtqUsedElem>(used_addr_ + 4 + 8ull * (i % size_)).value();
}

uint16_t VirtQueueBuilder::avail_event() const {
  return memory_.ReadObj<uint16_t>(used_addr_ + 4 + 8ull * size_).value();
}

std::vector<uint8_t> VirtQueueBuilder::ReadBytes(uint64_t gpa, uint64_t len) const {
  std::vector<uint8_t> out(len);
  DSEC_CHECK_OK(memory_.Read(gpa, out));
  return out;
}

void VirtQueueBuilder::WriteBytes(uint64_t gpa, const std::vector<uint8_t>& bytes) const {
  DSEC_CHECK_OK(memory_.Write(gpa, bytes));
}

}  // namespace dsec::virtio
