// SPDX-License-Identifier: Apache-2.0
#include "devices/vsock/vsock_connection.h"

#include <string>

#include "gtest/gtest.h"

namespace dsec::devices {
namespace {

constexpr uint64_t kGuestCid = 5;
constexpr uint32_t kHostPort = 1u << 30;
constexpr uint32_t kGuestPort = 52;

class VsockConnectionTest : public ::testing::Test {
 protected:
  VsockConnectionTest() {
    options_.guest_cid = kGuestCid;
    options_.buf_alloc = 1000;
    options_.host_buffer = 300;
  }

  VsockHeader FromGuest(VsockOp op, uint32_t flags = 0) {
    VsockHeader h;
    h.src_cid = kGuestCid;
    h.dst_cid = kVsockHostCid;
    h.src_port = kGuestPort;
    h.dst_port = kHostPort;
    h.op = op;
    h.flags = flags;
    h.buf_alloc = guest_buf_alloc_;
    h.fwd_cnt = guest_fwd_cnt_;
    return h;
  }
  void Send(VsockConnection& c, VsockOp op, uint32_t flags = 0) {
    c.OnGuestPacket(FromGuest(op, flags), {});
  }
  void SendData(VsockConnection& c, const std::string& s) {
    VsockHeader h = FromGuest(VsockOp::kRw);
    h.len = static_cast<uint32_t>(s.size());
    c.OnGuestPacket(h, std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  static void HostSends(VsockConnection& c, const std::string& s) {
    ASSERT_LE(s.size(), c.HostReadBudget());
    c.OnHostData(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  static std::optional<VsockOp> NextOp(VsockConnection& c, VsockPacket* out = nullptr,
                                       uint32_t max_payload = kVsockMaxPayload) {
    auto p = c.PopRxPacket(max_payload);
    if (!p) return std::nullopt;
    if (out) *out = *p;
    return p->hdr.op;
  }
  VsockConnection Established() {
    VsockConnection c = VsockConnection::GuestInitiated(options_, clock_, FromGuest(VsockOp::kRequest));
    EXPECT_EQ(NextOp(c), VsockOp::kResponse);
    return c;
  }

  VsockConnectionOptions options_;
  FakeClock clock_;
  uint32_t guest_buf_alloc_ = 500;
  uint32_t guest_fwd_cnt_ = 0;
};

TEST(VsockCreditTest, ArithmeticWrapsAroundU32Counters) {
  EXPECT_EQ(VsockCredit(1000, 0, 0), 1000u);
  EXPECT_EQ(VsockCredit(1000, 600, 100), 500u);
  // tx_cnt wrapped past 2^32, fwd_cnt not yet: 0x10 + 0x20 = 0x30 in flight.
  EXPECT_EQ(VsockCredit(1000, 0x10, 0xffffffe0u), 1000u - 0x30);
  EXPECT_EQ(VsockCredit(1000, 0xfffffff0u, 0xfffffff0u), 1000u);
  // A peer claiming more in flight than its buffer gives no credit.
  EXPECT_EQ(VsockCredit(1000, 2000, 0), 0u);
  EXPECT_EQ(VsockCredit(1000, 0, 1), 0u);  // fwd_cnt ahead of tx_cnt: huge in-flight
}

TEST_F(VsockConnectionTest, HostInitiatedSendsRequestAndEstablishesOnResponse) {
  auto c = VsockConnection::HostInitiated(options_, clock_, kHostPort, kGuestPort);
  EXPECT_EQ(c.state(), VsockConnection::State::kConnecting);
  EXPECT_EQ(c.HostReadBudget(), 0u);
  VsockPacket p;
  ASSERT_EQ(NextOp(c, &p), VsockOp::kRequest);
  EXPECT_EQ(p.hdr.src_cid, kVsockHostCid);
  EXPECT_EQ(p.hdr.dst_cid, kGuestCid);
  EXPECT_EQ(p.hdr.src_port, kHostPort);
  EXPECT_EQ(p.hdr.dst_port, kGuestPort);
  EXPECT_EQ(p.hdr.buf_alloc, 1000u);
  EXPECT_FALSE(c.HasRxPacket());
  Send(c, VsockOp::kResponse);
  EXPECT_EQ(c.state(), VsockConnection::State::kConnected);
  EXPECT_TRUE(c.TakeEstablished());
  EXPECT_FALSE(c.TakeEstablished());
  EXPECT_EQ(c.HostReadBudget(), 300u);  // host buffer < guest credit 500
}

TEST_F(VsockConnectionTest, ResponseBeforeRequestWasSentIsAProtocolError) {
  auto c = VsockConnection::HostInitiated(options_, clock_, kHostPort, kGuestPort);
  Send(c, VsockOp::kResponse);
  EXPECT_EQ(c.state(), VsockConnection::State::kClosed);
  // The guest never saw our REQUEST, so no RST is owed.
  EXPECT_TRUE(c.Finished());
}

TEST_F(VsockConnectionTest, GuestRstWhileConnectingClosesWithoutReply) {
  auto c = VsockConnection::HostInitiated(options_, clock_, kHostPort, kGuestPort);
  ASSERT_EQ(NextOp(c), VsockOp::kRequest);
  Send(c, VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
  EXPECT_FALSE(c.HasRxPacket());
  EXPECT_FALSE(c.TakeEstablished());
}

TEST_F(VsockConnectionTest, ConnectTimeoutResetsTheConnection) {
  auto c = VsockConnection::HostInitiated(options_, clock_, kHostPort, kGuestPort);
  ASSERT_EQ(NextOp(c), VsockOp::kRequest);
  clock_.AdvanceNs(options_.connect_timeout_ns - 1);
  c.CheckTimeout();
  EXPECT_EQ(c.state(), VsockConnection::State::kConnecting);
  clock_.AdvanceNs(1);
  c.CheckTimeout();
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
}

TEST_F(VsockConnectionTest, HostDataIsBoundedByGuestCredit) {
  options_.host_buffer = 10000;
  auto c = Established();
  EXPECT_EQ(c.HostReadBudget(), 500u);
  HostSends(c, std::string(500, 'x'));
  EXPECT_EQ(c.HostReadBudget(), 0u);
  VsockPacket p;
  ASSERT_EQ(NextOp(c, &p, 200), VsockOp::kRw);
  EXPECT_EQ(p.payload.size(), 200u);
  ASSERT_EQ(NextOp(c, &p), VsockOp::kRw);
  EXPECT_EQ(p.payload.size(), 300u);
  EXPECT_EQ(c.PeerCredit(), 0u);
  EXPECT_EQ(c.HostReadBudget(), 0u);
  EXPECT_FALSE(c.HasRxPacket());
  // The guest consumed 350 bytes and says so.
  guest_fwd_cnt_ = 350;
  Send(c, VsockOp::kCreditUpdate);
  EXPECT_EQ(c.PeerCredit(), 350u);
  EXPECT_EQ(c.HostReadBudget(), 350u);
}

TEST_F(VsockConnectionTest, CreditArithmeticSurvivesTxCounterWraparound) {
  options_.host_buffer = kVsockMaxPayload;
  guest_buf_alloc_ = kVsockMaxPayload;
  auto c = Established();
  const std::string chunk(kVsockMaxPayload, 'w');
  // 2^32 / 64 KiB packets take tx_cnt once around; go a little further.
  for (uint64_t i = 0; i < (1ull << 32) / kVsockMaxPayload + 2; ++i) {
    ASSERT_EQ(c.HostReadBudget(), kVsockMaxPayload) << i;
    c.OnHostData(std::span(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size()));
    auto p = c.PopRxPacket(kVsockMaxPayload);
    ASSERT_TRUE(p.has_value());
    ASSERT_EQ(p->payload.size(), kVsockMaxPayload);
    ASSERT_EQ(c.PeerCredit(), 0u);
    guest_fwd_cnt_ += kVsockMaxPayload;
    Send(c, VsockOp::kCreditUpdate);
  }
  EXPECT_EQ(c.tx_cnt(), 2 * kVsockMaxPayload);  // wrapped
  EXPECT_EQ(c.PeerCredit(), kVsockMaxPayload);
}

TEST_F(VsockConnectionTest, GuestDataIsBufferedForTheHostAndCreditReturned) {
  auto c = Established();
  SendData(c, std::string(600, 'g'));
  EXPECT_EQ(c.buffered_to_host(), 600u);
  EXPECT_EQ(c.rx_cnt(), 600u);
  EXPECT_FALSE(c.HasRxPacket());
  c.OnHostConsumed(50);
  EXPECT_EQ(c.fwd_cnt(), 50u);
  // The guest believes 400 of 1000 are free (< half) but only 450 really
  // are: not worth a packet yet.
  EXPECT_FALSE(c.HasRxPacket());
  SendData(c, std::string(300, 'g'));
  c.OnHostConsumed(100);  // guest view 100 free, actual 250
  EXPECT_FALSE(c.HasRxPacket());
  c.OnHostConsumed(300);  // actual free 550 >= 500: tell the guest
  VsockPacket p;
  ASSERT_EQ(NextOp(c, &p), VsockOp::kCreditUpdate);
  EXPECT_EQ(p.hdr.fwd_cnt, 450u);
  EXPECT_EQ(p.hdr.buf_alloc, 1000u);
  EXPECT_FALSE(c.HasRxPacket());
}

TEST_F(VsockConnectionTest, GuestExceedingCreditIsReset) {
  auto c = Established();
  SendData(c, std::string(1000, 'g'));
  EXPECT_EQ(c.state(), VsockConnection::State::kConnected);
  SendData(c, "x");
  EXPECT_EQ(c.state(), VsockConnection::State::kClosed);
  EXPECT_STREQ(c.reset_reason(), "guest exceeded its credit");
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
}

TEST_F(VsockConnectionTest, CreditRequestIsAnsweredWithCreditUpdate) {
  auto c = Established();
  Send(c, VsockOp::kCreditRequest);
  EXPECT_EQ(NextOp(c), VsockOp::kCreditUpdate);
}

TEST_F(VsockConnectionTest, HostEofSendsShutdownSendAfterPendingData) {
  auto c = Established();
  HostSends(c, "abc");
  c.OnHostEof();
  EXPECT_EQ(c.HostReadBudget(), 0u);
  VsockPacket p;
  ASSERT_EQ(NextOp(c, &p), VsockOp::kRw);
  ASSERT_EQ(NextOp(c, &p), VsockOp::kShutdown);
  EXPECT_EQ(p.hdr.flags, kVsockShutdownSend);
  EXPECT_EQ(c.state(), VsockConnection::State::kConnected);  // guest may still send
  SendData(c, "reply");
  EXPECT_EQ(c.buffered_to_host(), 5u);
}

TEST_F(VsockConnectionTest, GuestShutdownBothFlushesToHostThenRepliesRst) {
  auto c = Established();
  SendData(c, "bye");
  Send(c, VsockOp::kShutdown, kVsockShutdownBoth);
  EXPECT_TRUE(c.WantsHostReadShutdown());
  c.OnHostReadShutdown();
  EXPECT_FALSE(c.WantsHostWriteShutdown());  // 3 bytes still owed to the host
  c.OnHostConsumed(3);
  ASSERT_TRUE(c.WantsHostWriteShutdown());
  c.OnHostWriteShutdown();
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
  EXPECT_STREQ(c.reset_reason(), "");
}

TEST_F(VsockConnectionTest, HalfCloseBothWaysEndsWithOurShutdownAndGuestRst) {
  auto c = Established();
  Send(c, VsockOp::kShutdown, kVsockShutdownSend);
  ASSERT_TRUE(c.WantsHostWriteShutdown());
  c.OnHostWriteShutdown();
  EXPECT_EQ(c.state(), VsockConnection::State::kConnected);
  HostSends(c, "answer");
  c.OnHostEof();
  ASSERT_EQ(NextOp(c), VsockOp::kRw);
  VsockPacket p;
  ASSERT_EQ(NextOp(c, &p), VsockOp::kShutdown);
  EXPECT_EQ(p.hdr.flags, kVsockShutdownBoth);
  EXPECT_EQ(c.state(), VsockConnection::State::kClosing);
  Send(c, VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
}

TEST_F(VsockConnectionTest, ShutdownTimeoutResetsAGuestThatNeverAnswers) {
  auto c = Established();
  Send(c, VsockOp::kShutdown, kVsockShutdownSend);
  c.OnHostWriteShutdown();
  c.OnHostEof();
  ASSERT_EQ(NextOp(c), VsockOp::kShutdown);
  ASSERT_EQ(c.state(), VsockConnection::State::kClosing);
  clock_.AdvanceNs(options_.shutdown_timeout_ns);
  c.CheckTimeout();
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
}

TEST_F(VsockConnectionTest, HostWriteErrorTellsGuestWeReceiveNoMore) {
  auto c = Established();
  SendData(c, "lost");
  c.OnHostWriteError();
  EXPECT_EQ(c.buffered_to_host(), 0u);
  EXPECT_EQ(c.fwd_cnt(), 4u);
  VsockPacket p;
  ASSERT_EQ(NextOp(c, &p), VsockOp::kShutdown);
  EXPECT_EQ(p.hdr.flags, kVsockShutdownRcv);
}

TEST_F(VsockConnectionTest, DataAfterGuestShutdownSendIsReset) {
  auto c = Established();
  Send(c, VsockOp::kShutdown, kVsockShutdownSend);
  SendData(c, "late");
  EXPECT_EQ(c.state(), VsockConnection::State::kClosed);
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
}

TEST_F(VsockConnectionTest, DuplicateRequestOnConnectedStreamIsReset) {
  auto c = Established();
  Send(c, VsockOp::kRequest);
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
  EXPECT_TRUE(c.Finished());
}

TEST_F(VsockConnectionTest, AbortSendsRstOnce) {
  auto c = Established();
  HostSends(c, "pending");
  c.Abort();
  EXPECT_EQ(c.buffered_to_guest(), 0u);
  EXPECT_EQ(NextOp(c), VsockOp::kRst);
  EXPECT_FALSE(c.HasRxPacket());
  c.Abort();
  EXPECT_FALSE(c.HasRxPacket());
}

TEST_F(VsockConnectionTest, GuestShutdownRcvDropsBufferedHostData) {
  auto c = Established();
  HostSends(c, "unwanted");
  Send(c, VsockOp::kShutdown, kVsockShutdownRcv);
  EXPECT_EQ(c.buffered_to_guest(), 0u);
  EXPECT_EQ(c.HostReadBudget(), 0u);
  EXPECT_TRUE(c.WantsHostReadShutdown());
}

}  // namespace
}  // namespace dsec::devices
