// SPDX-License-Identifier: Apache-2.0
#include "devices/serial/serial_device.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "platform/interrupt/fake_interrupt_line.h"
#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kThr = 0, kIer = 1, kIir = 2, kFcr = 2, kLcr = 3, kMcr = 4, kLsr = 5,
                   kMsr = 6, kScr = 7;

class StringSink : public ByteSink {
 public:
  using ByteSink::Put;
  void Put(std::span<const uint8_t> bytes) override {
    absl::MutexLock lock(&mu_);
    out_.append(bytes.begin(), bytes.end());
  }
  std::string out() const {
    absl::MutexLock lock(&mu_);
    return out_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string out_;
};

class SerialDeviceTest : public ::testing::Test {
 protected:
  uint8_t In(uint64_t port) {
    uint8_t v = 0;
    uart_.Read(port, std::span<uint8_t>(&v, 1));
    return v;
  }
  void Out(uint64_t port, uint8_t v) { uart_.Write(port, std::span<const uint8_t>(&v, 1)); }
  void Enqueue(const std::string& s) {
    uart_.EnqueueInput(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()),
                                                s.size()));
  }

  StringSink sink_;
  FakeInterruptLine irq_;
  SerialDevice uart_{&sink_, &irq_, 16};
};

TEST_F(SerialDeviceTest, TransmitsToSinkAndThrAlwaysEmpty) {
  for (char c : std::string("hi\n")) Out(kThr, static_cast<uint8_t>(c));
  EXPECT_EQ(sink_.out(), "hi\n");
  EXPECT_EQ(In(kLsr) & 0x60, 0x60);  // THRE | TEMT
  EXPECT_EQ(uart_.metrics().tx_bytes, 3u);
  EXPECT_EQ(irq_.count(), 0u);  // no interrupts enabled
}

TEST_F(SerialDeviceTest, DlabSwitchesPortsZeroAndOneToDivisorLatch) {
  Out(kIer, 0x05);
  Out(kLcr, 0x83);
  Out(kThr, 0x01);  // DLL
  Out(kIer, 0x02);  // DLM
  EXPECT_EQ(In(kThr), 0x01);
  EXPECT_EQ(In(kIer), 0x02);
  EXPECT_EQ(sink_.out(), "");  // nothing transmitted
  Out(kLcr, 0x03);
  EXPECT_EQ(In(kIer), 0x05);  // IER kept its value
  EXPECT_EQ(In(kLcr), 0x03);
}

TEST_F(SerialDeviceTest, IerKeepsOnlyLowNibbleAndScratchHoldsValue) {
  Out(kIer, 0xff);
  EXPECT_EQ(In(kIer), 0x0f);
  Out(kScr, 0xa5);
  EXPECT_EQ(In(kScr), 0xa5);
}

TEST_F(SerialDeviceTest, FifoEnableIsReflectedInIir) {
  EXPECT_EQ(In(kIir), 0x01);
  Out(kFcr, 0x01);
  EXPECT_EQ(In(kIir), 0xc1);
  Out(kFcr, 0x00);
  EXPECT_EQ(In(kIir), 0x01);
}

TEST_F(SerialDeviceTest, EnablingEtbeiRaisesThrEmptyInterrupt) {
  Out(kIer, 0x02);
  EXPECT_EQ(irq_.TakeCount(), 1u);
  EXPECT_EQ(In(kIir), 0x02);
  // Reading IIR acknowledged it.
  EXPECT_EQ(In(kIir), 0x01);
  // Re-enabling asserts it again (Linux's UART_BUG_THRE probe expects this).
  Out(kIer, 0x00);
  Out(kIer, 0x02);
  EXPECT_EQ(irq_.TakeCount(), 1u);
  EXPECT_EQ(In(kIir), 0x02);
}

TEST_F(SerialDeviceTest, ThrWriteReassertsThrEmptyAfterAcknowledge) {
  Out(kIer, 0x02);
  EXPECT_EQ(In(kIir), 0x02);
  EXPECT_EQ(irq_.TakeCount(), 1u);
  Out(kThr, 'a');
  EXPECT_EQ(irq_.TakeCount(), 1u);
  Out(kThr, 'b');  // line already high: no new edge
  EXPECT_EQ(irq_.TakeCount(), 0u);
  EXPECT_EQ(In(kIir), 0x02);
}

TEST_F(SerialDeviceTest, ReceivedDataSetsDrAndInterrupts) {
  Out(kIer, 0x01);
  EXPECT_EQ(In(kLsr) & 0x01, 0);
  Enqueue("ok");
  EXPECT_EQ(irq_.TakeCount(), 1u);
  EXPECT_EQ(In(kLsr) & 0x01, 0x01);
  EXPECT_EQ(In(kIir), 0x04);
  EXPECT_EQ(In(kThr), 'o');
  EXPECT_EQ(In(kThr), 'k');
  EXPECT_EQ(In(kLsr) & 0x01, 0);
  EXPECT_EQ(In(kIir), 0x01);
}

TEST_F(SerialDeviceTest, IirReportsHighestPriorityFirst) {
  Out(kIer, 0x0f);  // all sources
  EXPECT_EQ(In(kIir), 0x02);  // THRE, acknowledged by this read
  Out(kThr, 'x');             // THRE pending again
  Enqueue("a");
  EXPECT_EQ(In(kIir), 0x04);  // RX data beats THRE
  // Overflow the 16-byte RX FIFO: line status beats RX data.
  Enqueue(std::string(20, 'z'));
  EXPECT_EQ(In(kIir), 0x06);
  EXPECT_EQ(In(kLsr) & 0x03, 0x03);  // DR | OE; reading clears OE
  EXPECT_EQ(In(kIir), 0x04);
  for (int i = 0; i < 16; ++i) In(kThr);
  EXPECT_EQ(In(kIir), 0x02);
  EXPECT_EQ(In(kIir), 0x01);
  EXPECT_EQ(uart_.metrics().rx_overflow, 5u);
}

TEST_F(SerialDeviceTest, RxFifoIsBoundedAndReportsAcceptedCount) {
  EXPECT_EQ(uart_.RxSpace(), 16u);
  const std::string big(40, 'q');
  EXPECT_EQ(uart_.EnqueueInput(std::span<const uint8_t>(
                reinterpret_cast<const uint8_t*>(big.data()), big.size())),
            16u);
  EXPECT_EQ(uart_.RxSpace(), 0u);
  EXPECT_EQ(uart_.metrics().rx_bytes, 16u);
  EXPECT_EQ(uart_.metrics().rx_overflow, 24u);
  Out(kFcr, 0x03);  // enable + clear RX
  EXPECT_EQ(uart_.RxSpace(), 16u);
}

TEST_F(SerialDeviceTest, LoopbackFeedsReceiverAndMirrorsModemLines) {
  EXPECT_EQ(In(kMsr) & 0xf0, 0xb0);  // CTS, DSR, DCD: a connected peer
  Out(kMcr, 0x10 | 0x0a);            // loop, RTS, OUT2
  EXPECT_EQ(In(kMsr) & 0xf0, 0x90);  // CTS = RTS, DCD = OUT2 (Linux's loopback probe)
  Out(kThr, 'L');
  EXPECT_EQ(sink_.out(), "");
  EXPECT_EQ(In(kLsr) & 0x01, 0x01);
  EXPECT_EQ(In(kThr), 'L');
}

TEST_F(SerialDeviceTest, ModemStatusDeltasInterruptAndClearOnRead) {
  Out(kIer, 0x08);
  EXPECT_EQ(irq_.TakeCount(), 0u);
  Out(kMcr, 0x10);  // loopback with all outputs low: CTS/DSR/DCD drop
  EXPECT_EQ(irq_.TakeCount(), 1u);
  EXPECT_EQ(In(kIir), 0x00);
  const uint8_t msr = In(kMsr);
  EXPECT_EQ(msr & 0x0f, 0x0b);  // DCTS, DDSR, DDCD
  EXPECT_EQ(In(kMsr) & 0x0f, 0);
  EXPECT_EQ(In(kIir), 0x01);
}

TEST_F(SerialDeviceTest, WideAccessIsSplitIntoByteCycles) {
  const uint8_t two[2] = {'A', 0x00};  // THR='A', IER=0
  uart_.Write(kThr, two);
  EXPECT_EQ(sink_.out(), "A");
  uint8_t out[2] = {};
  uart_.Read(kLcr, out);  // LCR, MCR
  EXPECT_EQ(out[0], 0x03);
  EXPECT_EQ(out[1], 0x00);
}

TEST_F(SerialDeviceTest, ConcurrentWritersLoseNoBytes) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this] {
      for (int i = 0; i < 5000; ++i) Out(kThr, 'x');
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(sink_.out().size(), 20000u);
  EXPECT_EQ(uart_.metrics().tx_bytes, 20000u);
}

}  // namespace
}  // namespace dsec::devices
