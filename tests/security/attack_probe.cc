// SPDX-License-Identifier: Apache-2.0
// Runs inside a container sandbox during the security tests. Prints one
// line per probe: "ok" or the errno name, so the test can assert on it.
//   attack_probe ioctl swapext|ficlone|fideduperange|blkdiscard FILE
//   attack_probe read FILE
//   attack_probe connect-unix PATH
//   attack_probe connect-abstract NAME
//   attack_probe connect-vsock CID PORT     (AF_VSOCK, inside a microVM)
//   attack_probe connect-inet ADDR PORT     (IPv4 TCP)
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <linux/vm_sockets.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

int Report(long rc) {
  if (rc >= 0) {
    printf("ok\n");
  } else {
    printf("%s\n", strerrorname_np(errno));
  }
  return 0;
}

int Ioctl(const std::string& what, const char* path) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return Report(-1);
  int other = open(path, O_RDONLY | O_CLOEXEC);
  if (what == "swapext") {
    // XFS_IOC_SWAPEXT = _IOWR('X', 109, struct xfs_swapext): 0xc0c0586d.
    unsigned char swapext[0xc0] = {};
    return Report(syscall(SYS_ioctl, fd, 0xc0c0586dul, swapext));
  }
  if (what == "ficlone") return Report(ioctl(fd, FICLONE, other));
  if (what == "ficlonerange") {
    file_clone_range r{};
    r.src_fd = other;
    return Report(ioctl(fd, FICLONERANGE, &r));
  }
  if (what == "fideduperange") {
    unsigned char buf[sizeof(file_dedupe_range) + sizeof(file_dedupe_range_info)] = {};
    auto* r = reinterpret_cast<file_dedupe_range*>(buf);
    r->src_length = 4096;
    r->dest_count = 1;
    r->info[0].dest_fd = other;
    return Report(ioctl(fd, FIDEDUPERANGE, r));
  }
  if (what == "blkdiscard") {
    uint64_t range[2] = {0, 4096};
    return Report(ioctl(fd, BLKDISCARD, range));
  }
  printf("unknown ioctl\n");
  return 2;
}

int Read(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Report(-1);
  char buf[65536];
  long total = 0;
  long n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) total += n;
  if (n < 0) return Report(-1);
  printf("read %ld\n", total);
  return 0;
}

int Connect(const std::string& name, bool abstract) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Report(-1);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t off = abstract ? 1 : 0;
  if (name.size() + off >= sizeof(addr.sun_path)) return 2;
  memcpy(addr.sun_path + off, name.data(), name.size());
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + off + name.size());
  return Report(connect(s, reinterpret_cast<sockaddr*>(&addr), len));
}

int ConnectVsock(const char* cid, const char* port) {
  int s = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Report(-1);
  sockaddr_vm addr{};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = static_cast<unsigned>(strtoul(cid, nullptr, 10));
  addr.svm_port = static_cast<unsigned>(strtoul(port, nullptr, 10));
  return Report(connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
}

int ConnectInet(const char* ip, const char* port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Report(-1);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(strtoul(port, nullptr, 10)));
  if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) return 2;
  return Report(connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::string(argv[1]) == "ioctl") return Ioctl(argv[2], argv[3]);
  if (argc >= 3 && std::string(argv[1]) == "read") return Read(argv[2]);
  if (argc >= 3 && std::string(argv[1]) == "connect-unix") return Connect(argv[2], false);
  if (argc >= 3 && std::string(argv[1]) == "connect-abstract") return Connect(argv[2], true);
  if (argc >= 4 && std::string(argv[1]) == "connect-vsock") return ConnectVsock(argv[2], argv[3]);
  if (argc >= 4 && std::string(argv[1]) == "connect-inet") return ConnectInet(argv[2], argv[3]);
  fprintf(stderr, "usage: attack_probe ioctl|read|connect-unix|connect-abstract|connect-vsock|connect-inet ...\n");
  return 2;
}
