// SPDX-License-Identifier: Apache-2.0
#include "devices/testdev/testdev_device.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "devices/testdev/testdev_regs.h"
#include "base/little_endian.h"
#include "base/json_fields.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::devices {
namespace {

bool ValidAccess(uint64_t offset, size_t size) {
  return (size == 4 || size == 8) && offset % size == 0 && offset < DSEC_TESTDEV_SIZE;
}

// The 32-bit register at a 4-aligned offset, as the guest reads it.
uint32_t ReadRegister32(uint64_t offset) {
  switch (offset) {
    case DSEC_TESTDEV_REG_MAGIC:
      return DSEC_TESTDEV_MAGIC_VALUE;
    case DSEC_TESTDEV_REG_VERSION:
      return DSEC_TESTDEV_VERSION_VALUE;
    default:
      return 0;  // write-only and unassigned registers read as zero
  }
}

}  // namespace

TestDevice::TestDevice(const memory::GuestMemory& memory, Listener* listener, const Clock* clock)
    : TestDevice(memory, listener, clock, Limits{}) {}

TestDevice::TestDevice(const memory::GuestMemory& memory, Listener* listener, const Clock* clock,
                       Limits limits)
    : memory_(memory), listener_(listener), clock_(clock), limits_(limits) {}

void TestDevice::Read(uint64_t offset, std::span<uint8_t> data) {
  std::fill(data.begin(), data.end(), 0);
  if (!ValidAccess(offset, data.size())) {
    ignored_accesses_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t value = ReadRegister32(offset);
  if (data.size() == 8) value |= static_cast<uint64_t>(ReadRegister32(offset + 4)) << 32;
  StoreLe(value, data);
}

void TestDevice::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (!ValidAccess(offset, data.size())) {
    ignored_accesses_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Guest-controlled: value. Each register validates it below.
  const uint64_t value = LoadLe(data);
  switch (offset) {
    case DSEC_TESTDEV_REG_MSG_ADDR: {
      absl::MutexLock lock(&mu_);
      if (data.size() == 8) {
        msg_addr_ = value;
      } else {
        msg_addr_ = (msg_addr_ & ~0xffffffffull) | value;
      }
      return;
    }
    case DSEC_TESTDEV_REG_MSG_ADDR + 4:
      if (data.size() == 4) {
        absl::MutexLock lock(&mu_);
        msg_addr_ = (msg_addr_ & 0xffffffffull) | (value << 32);
        return;
      }
      break;
    case DSEC_TESTDEV_REG_MSG_LEN:
      SendMessage(value);
      return;
    case DSEC_TESTDEV_REG_EVENT:
      SendEvent(static_cast<uint32_t>(value));
      return;
    case DSEC_TESTDEV_REG_SHUTDOWN:
      SendShutdown(static_cast<uint32_t>(value));
      return;
    default:
      break;
  }
  ignored_accesses_.fetch_add(1, std::memory_order_relaxed);
}

void TestDevice::SendMessage(uint64_t len) {
  uint64_t addr;
  {
    absl::MutexLock lock(&mu_);
    addr = msg_addr_;
  }
  // Guest-controlled: addr and len. Checked against the limit, then every byte
  // is read through GuestMemory's bounds checks.
  if (len > DSEC_TESTDEV_MAX_MSG) {
    invalid_messages_.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(warn, 5, "device=testdev invalid message: len={} exceeds {}", len,
                         DSEC_TESTDEV_MAX_MSG);
    return;
  }
  std::string text(len, '\0');
  absl::Status read = memory_.Read(
      addr, std::span<uint8_t>(reinterpret_cast<uint8_t*>(text.data()), text.size()));
  if (!read.ok()) {
    invalid_messages_.fetch_add(1, std::memory_order_relaxed);
    DSEC_LOG_RATELIMITED(warn, 5, "device=testdev invalid message: addr={:#x} len={}: {}", addr,
                         len, read.ToString());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    if (budget_messages_ >= limits_.max_messages ||
        len > limits_.max_message_bytes - budget_bytes_) {
      messages_dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++budget_messages_;
    budget_bytes_ += len;
  }
  std::erase_if(text, [](char c) { return c < 0x20 || c > 0x7e; });
  messages_.fetch_add(1, std::memory_order_relaxed);
  message_bytes_.fetch_add(len, std::memory_order_relaxed);
  if (listener_ != nullptr) listener_->OnMessage(text);
}

void TestDevice::SendEvent(uint32_t code) {
  // Timestamp first: the write is the milestone.
  const int64_t now = clock_->NowNs();
  {
    absl::MutexLock lock(&mu_);
    if (budget_events_ >= limits_.max_events) {
      events_dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++budget_events_;
  }
  events_.fetch_add(1, std::memory_order_relaxed);
  if (listener_ != nullptr) listener_->OnEvent(code, now);
}

void TestDevice::SendShutdown(uint32_t code) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_sent_) {
      shutdowns_ignored_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    shutdown_sent_ = true;
  }
  if (listener_ != nullptr) listener_->OnShutdown(code);
}

TestDevice::Metrics TestDevice::metrics() const {
  Metrics m;
  m.messages = messages_.load(std::memory_order_relaxed);
  m.message_bytes = message_bytes_.load(std::memory_order_relaxed);
  m.messages_dropped = messages_dropped_.load(std::memory_order_relaxed);
  m.invalid_messages = invalid_messages_.load(std::memory_order_relaxed);
  m.events = events_.load(std::memory_order_relaxed);
  m.events_dropped = events_dropped_.load(std::memory_order_relaxed);
  m.shutdowns_ignored = shutdowns_ignored_.load(std::memory_order_relaxed);
  m.ignored_accesses = ignored_accesses_.load(std::memory_order_relaxed);
  return m;
}


nlohmann::json TestDevice::SaveState() const {
  absl::MutexLock lock(&mu_);
  return {{"msg_addr", msg_addr_},
          {"messages", budget_messages_},
          {"message_bytes", budget_bytes_},
          {"events", budget_events_},
          {"shutdown_sent", shutdown_sent_}};
}

absl::Status TestDevice::RestoreState(const nlohmann::json& state) {
  DSEC_ASSIGN_OR_RETURN(JsonFields f, JsonFields::Of(state, "testdev"));
  DSEC_ASSIGN_OR_RETURN(uint64_t msg_addr, f.Uint("msg_addr", 0, UINT64_MAX));
  // The budgets carry on from where the snapshot's guest had used them.
  DSEC_ASSIGN_OR_RETURN(uint64_t messages, f.Uint("messages", 0, limits_.max_messages));
  DSEC_ASSIGN_OR_RETURN(uint64_t bytes, f.Uint("message_bytes", 0, limits_.max_message_bytes));
  DSEC_ASSIGN_OR_RETURN(uint64_t events, f.Uint("events", 0, limits_.max_events));
  DSEC_ASSIGN_OR_RETURN(bool shutdown_sent, f.Bool("shutdown_sent"));
  DSEC_RETURN_IF_ERROR(f.RejectUnknown());
  absl::MutexLock lock(&mu_);
  msg_addr_ = msg_addr;
  budget_messages_ = messages;
  budget_bytes_ = bytes;
  budget_events_ = events;
  shutdown_sent_ = shutdown_sent;
  return absl::OkStatus();
}
}  // namespace dsec::devices
