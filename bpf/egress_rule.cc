// SPDX-License-Identifier: Apache-2.0
#include "bpf/egress_rule.h"

#include <arpa/inet.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dsec::bpf {

namespace {

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("egress rule \"", absl::string_view(text.data(), text.size()), "\": ",
                   absl::string_view(why.data(), why.size())));
}

}  // namespace

absl::StatusOr<EgressRule> ParseEgressRule(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  if (text.size() > 64) return Bad(text.substr(0, 64), "longer than 64 characters");
  EgressRule r;
  std::string_view addr_part = text;
  std::string_view port_part;
  bool has_port = false;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return Bad(text, "'[' without ']'");
    addr_part = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return Bad(text, "expected ':PORT' after ']'");
      port_part = rest.substr(1);
      has_port = true;
    }
    r.ipv6 = true;
  } else if (text.find(':') != std::string_view::npos &&
             text.find(':') == text.rfind(':') && text.find('.') != std::string_view::npos) {
    // IPv4 with a port: exactly one ':' and dots.
    const size_t colon = text.find(':');
    addr_part = text.substr(0, colon);
    port_part = text.substr(colon + 1);
    has_port = true;
  } else {
    r.ipv6 = text.find(':') != std::string_view::npos;
  }
  std::string_view len_part;
  bool has_len = false;
  if (const size_t slash = addr_part.find('/'); slash != std::string_view::npos) {
    len_part = addr_part.substr(slash + 1);
    addr_part = addr_part.substr(0, slash);
    has_len = true;
  }
  const std::string addr(addr_part);
  if (r.ipv6) {
    if (inet_pton(AF_INET6, addr.c_str(), r.addr.data()) != 1) return Bad(text, "not an IPv6 address");
  } else {
    if (inet_pton(AF_INET, addr.c_str(), r.addr.data()) != 1) return Bad(text, "not an IPv4 address");
  }
  const int bits = r.ipv6 ? 128 : 32;
  r.prefix_len = bits;
  if (has_len) {
    int len = -1;
    if (len_part.empty() || len_part.size() > 3 ||
        !absl::SimpleAtoi(absl::string_view(len_part.data(), len_part.size()), &len) || len < 0 ||
        len > bits) {
      return Bad(text, absl::StrCat("prefix length must be 0..", bits));
    }
    r.prefix_len = len;
  }
  for (int bit = r.prefix_len; bit < bits; ++bit) {
    if (r.addr[bit / 8] & (0x80 >> (bit % 8))) {
      return Bad(text, "address has bits set beyond its prefix length");
    }
  }
  if (has_port) {
    uint32_t port = 0;
    if (port_part.empty() || port_part.size() > 5 ||
        !absl::SimpleAtoi(absl::string_view(port_part.data(), port_part.size()), &port) || port == 0 ||
        port > 65535) {
      return Bad(text, "port must be 1..65535");
    }
    r.port = static_cast<uint16_t>(port);
  }
  return r;
}

std::string FormatEgressRule(const EgressRule& rule) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(rule.ipv6 ? AF_INET6 : AF_INET, rule.addr.data(), buf, sizeof(buf));
  std::string out = absl::StrCat(buf, "/", rule.prefix_len);
  if (rule.port == 0) return out;
  if (rule.ipv6) return absl::StrCat("[", out, "]:", rule.port);
  return absl::StrCat(out, ":", rule.port);
}

std::vector<uint8_t> EgressRuleKey(const EgressRule& rule) {
  const size_t addr_len = rule.ipv6 ? 16 : 4;
  std::vector<uint8_t> key(4 + 2 + addr_len);
  // A rule for every port matches the lookup made with port 0, so its port
  // bits are part of the prefix either way.
  const uint32_t prefix = 16 + static_cast<uint32_t>(rule.prefix_len);
  std::memcpy(key.data(), &prefix, 4);  // host order: the kernel reads a native u32
  const uint16_t port_be = htons(rule.port);
  std::memcpy(key.data() + 4, &port_be, 2);
  std::memcpy(key.data() + 6, rule.addr.data(), addr_len);
  return key;
}

}  // namespace dsec::bpf
