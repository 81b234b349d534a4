// SPDX-License-Identifier: Apache-2.0
#include "guest-kernel/agent/pid1.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/random.h>
#include <linux/vm_sockets.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "guest-kernel/agent/boot_plan.h"
#include "guest-kernel/agent/reaper.h"
#include "guest-kernel/agent/server.h"
#include "guest-kernel/agent/sys_util.h"
#include "base/scoped_fd.h"

namespace dsec::agent {

namespace {

// One write(2) per line, so lines stay whole between kernel messages.
void Console(const std::string& text) {
  std::string line = absl::StrCat("dsec-agent: ", text, "\n");
  ssize_t ignored = write(STDOUT_FILENO, line.data(), line.size());
  (void)ignored;
}

std::string Err(int err = errno) { return std::strerror(err); }

bool FdValid(int fd) { return fcntl(fd, F_GETFD) >= 0; }

// mkdir that accepts an existing directory.
bool EnsureDir(const std::string& path, mode_t mode = 0755) {
  if (mkdir(path.c_str(), mode) == 0) return true;
  struct stat st;
  int err = errno;  // EEXIST, or EROFS on a read-only root image
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
  Console(absl::StrCat("error: mkdir ", path, ": ", Err(err)));
  return false;
}

bool IsFsType(const char* path, long magic) {
  struct statfs fs;
  return statfs(path, &fs) == 0 && static_cast<long>(fs.f_type) == magic;
}

bool Mount(const char* src, const std::string& target, const char* type, unsigned long flags,
           const std::string& data) {
  if (mount(src, target.c_str(), type, flags, data.empty() ? nullptr : data.c_str()) == 0)
    return true;
  Console(absl::StrCat("error: mount ", type != nullptr ? type : "(move)", " on ", target, ": ",
                       Err()));
  return false;
}

// If the kernel started us without a console (no /dev/console in the root
// image and no devtmpfs automount), make one.
void EnsureConsole() {
  if (FdValid(0) && FdValid(1) && FdValid(2)) return;
  mkdir("/dev", 0755);
  mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  // Not close-on-exec: it becomes 0-2, which every command inherits.
  ScopedFd console(open("/dev/console", O_RDWR | O_NOCTTY));
  if (!console) return;
  for (int fd = 0; fd < 3; ++fd) {
    if (!FdValid(fd)) dup2(console.get(), fd);
  }
  if (console.get() <= 2) console.Release();  // it is one of 0-2 itself
}

void MountPseudoFilesystems() {
  // Our mounts must not propagate anywhere (and pivot_root refuses shared
  // mounts).
  mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr);
  if (EnsureDir("/proc") && !IsFsType("/proc", PROC_SUPER_MAGIC)) {
    Mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  }
  if (EnsureDir("/sys") && !IsFsType("/sys", SYSFS_MAGIC)) {
    Mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
  }
  // devtmpfs reports the tmpfs magic (the kernel may have mounted it).
  if (EnsureDir("/dev") && !IsFsType("/dev", TMPFS_MAGIC) && !IsFsType("/dev", RAMFS_MAGIC)) {
    Mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
  }
  if (EnsureDir("/dev/pts")) {
    Mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          "newinstance,ptmxmode=0666,mode=0620");
  }
  if (EnsureDir("/dev/shm", 01777))
    Mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
}

// A whole small file (procfs), or "" if it cannot be read.
std::string ReadSmallFile(const char* path) {
  ScopedFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return "";
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Carries out the plan up to and including the pivot. Returns a descriptor
// of the upper directory (for pack_diff), or an invalid one if the root
// could not be set up (the agent then serves from the initial root).
ScopedFd SetupRoot(const MountPlan& plan) {
  if (!plan.layers.empty()) {
    if (!EnsureDir(plan.layers_dir) ||
        !Mount("tmpfs", plan.layers_dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")) {
      return {};
    }
  }
  for (const LayerMount& layer : plan.layers) {
    if (!EnsureDir(layer.dir)) return {};
    int dax = 1;
    if (mount(layer.device.c_str(), layer.dir.c_str(), "erofs", MS_RDONLY, "dax=always") != 0) {
      Console(absl::StrCat("warning: layer ", layer.device, ": mount with dax=always failed (",
                           Err(), "); retrying without DAX"));
      dax = 0;
      if (!Mount(layer.device.c_str(), layer.dir, "erofs", MS_RDONLY, "")) return {};
    } else if (std::string info = ReadSmallFile("/proc/self/mountinfo");
               !info.empty() && !MountHasOption(info, layer.dir, "dax=always")) {
      // EROFS turns DAX off (and says so only in dmesg) when the device
      // cannot do it.
      Console(absl::StrCat("warning: layer ", layer.device, ": the kernel turned DAX off"));
      dax = 0;
    }
    Console(absl::StrCat("layer ", layer.device, " at ", layer.dir, " dax=", dax));
  }
  if (!EnsureDir(plan.run_dir) ||
      !Mount("tmpfs", plan.run_dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") ||
      !EnsureDir(plan.upper_mount) ||
      !Mount("tmpfs", plan.upper_mount, "tmpfs", MS_NOSUID | MS_NODEV, plan.upper_tmpfs_data) ||
      !EnsureDir(plan.upper_dir) || !EnsureDir(plan.work_dir) || !EnsureDir(plan.newroot) ||
      !Mount("overlay", plan.newroot, "overlay", 0, plan.overlay_data)) {
    return {};
  }
  ScopedFd upper(open(plan.upper_dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!upper) {
    Console(absl::StrCat("error: open ", plan.upper_dir, ": ", Err()));
    return {};
  }
  const std::string& nr = plan.newroot;
  for (const char* d : {"/proc", "/sys", "/dev", "/run"}) {
    if (!EnsureDir(nr + d)) return {};
  }
  for (const char* d : {"/proc", "/sys", "/dev"}) {
    if (!Mount(d, nr + d, nullptr, MS_MOVE, "")) return {};
  }
  // /run in the new root is a fresh tmpfs (as on any booted system) that
  // shows the layer mounts read-only; the upper stays in the old root.
  std::string visible = nr + plan.visible_layers_dir;
  if (Mount("tmpfs", nr + "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") &&
      !plan.layers.empty()) {
    std::string parent = visible.substr(0, visible.rfind('/'));
    if (EnsureDir(parent) && EnsureDir(visible)) {
      Mount(plan.layers_dir.c_str(), visible, nullptr, MS_MOVE, "");
    }
  }
  if (chdir(nr.c_str()) != 0) {
    Console(absl::StrCat("error: chdir ", nr, ": ", Err()));
    return {};
  }
  if (syscall(SYS_pivot_root, ".", ".") == 0) {
    // The old root now sits on top of the new one: detach it (the overlay
    // and our descriptor keep what they need of it alive).
    umount2(".", MNT_DETACH);
  } else if (errno == EINVAL) {
    // The initial rootfs (initramfs) cannot be pivoted away: move the new
    // root over it and chroot, as switch_root does.
    if (!Mount(".", "/", nullptr, MS_MOVE, "")) return {};
    if (chroot(".") != 0) {
      Console(absl::StrCat("error: chroot: ", Err()));
      return {};
    }
  } else {
    Console(absl::StrCat("error: pivot_root: ", Err()));
    return {};
  }
  if (chdir("/") != 0) Console(absl::StrCat("warning: chdir /: ", Err()));
  Console("root ready");
  return upper;
}

[[noreturn]] void PowerOff() {
  Console("powering off");
  sync();
  reboot(RB_POWER_OFF);
  Console(absl::StrCat("error: reboot: ", Err()));
  for (;;) pause();
}

bool SetFlagsUp(int sock, const char* name) {
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
  if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return false;
  ifr.ifr_flags |= IFF_UP;
  return ioctl(sock, SIOCSIFFLAGS, &ifr) == 0;
}

struct sockaddr Inet(uint32_t host_order) {
  struct sockaddr sa = {};
  auto* in = reinterpret_cast<struct sockaddr_in*>(&sa);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(host_order);
  return sa;
}

// dsec.net: lo and eth0 (the virtio-net device, probed before init runs)
// up, eth0's address, the default route through the gateway, and
// /etc/resolv.conf naming it (the node resolver). Plain ioctls: nothing
// in the guest needs iproute2. The first failing step's error.
absl::Status ConfigureNetwork(const NetConfig& net) {
  ScopedFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return absl::InternalError(absl::StrCat("network: socket: ", Err()));
  if (!SetFlagsUp(sock.get(), "lo")) Console(absl::StrCat("warning: network: lo up: ", Err()));
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
  ifr.ifr_addr = Inet(net.address);
  if (ioctl(sock.get(), SIOCSIFADDR, &ifr) != 0) {
    return absl::InternalError(absl::StrCat("network: eth0 address ", Ipv4String(net.address), ": ", Err()));
  }
  ifr.ifr_netmask = Inet(net.prefix_len == 32 ? 0xffffffffu : ~(0xffffffffu >> net.prefix_len));
  if (ioctl(sock.get(), SIOCSIFNETMASK, &ifr) != 0) {
    return absl::InternalError(absl::StrCat("network: eth0 netmask /", net.prefix_len, ": ", Err()));
  }
  if (!SetFlagsUp(sock.get(), "eth0")) return absl::InternalError(absl::StrCat("network: eth0 up: ", Err()));
  struct rtentry route = {};
  route.rt_dst = Inet(0);
  route.rt_genmask = Inet(0);
  route.rt_gateway = Inet(net.gateway);
  route.rt_flags = RTF_UP | RTF_GATEWAY;
  char dev[] = "eth0";
  route.rt_dev = dev;
  if (ioctl(sock.get(), SIOCADDRT, &route) != 0) {
    return absl::InternalError(
        absl::StrCat("network: default route via ", Ipv4String(net.gateway), ": ", Err()));
  }
  // A symlink (systemd-resolved's) would send the write elsewhere.
  (void)unlink("/etc/resolv.conf");
  ScopedFd conf(open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644));
  const std::string text = absl::StrCat("nameserver ", Ipv4String(net.gateway), "\n");
  if (!conf || write(conf.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return absl::InternalError(absl::StrCat("network: /etc/resolv.conf: ", Err()));
  }
  Console(absl::StrCat("network: eth0 ", Ipv4String(net.address), "/", net.prefix_len, " via ",
                       Ipv4String(net.gateway)));
  return absl::OkStatus();
}

// The host's seed into the input pool, credited (RNDADDENTROPY), then a
// reseed of the CRNG from it at once (RNDRESEEDCRNG): what a clone draws
// from then on is its own.
absl::Status Reseed(const std::string& seed) {
  ScopedFd fd(open("/dev/urandom", O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return absl::InternalError(absl::StrCat("open /dev/urandom: ", Err()));
  std::string buf(sizeof(struct rand_pool_info) + seed.size(), '\0');
  auto* info = reinterpret_cast<struct rand_pool_info*>(buf.data());
  info->entropy_count = static_cast<int>(seed.size() * 8);
  info->buf_size = static_cast<int>(seed.size());
  std::memcpy(buf.data() + sizeof(struct rand_pool_info), seed.data(), seed.size());
  if (ioctl(fd.get(), RNDADDENTROPY, info) != 0) return absl::InternalError(absl::StrCat("RNDADDENTROPY: ", Err()));
  if (ioctl(fd.get(), RNDRESEEDCRNG) != 0) return absl::InternalError(absl::StrCat("RNDRESEEDCRNG: ", Err()));
  return absl::OkStatus();
}

// The agent's NETWORK request: a guest restored from another sandbox's
// saved machine still holds that one's address, routes and neighbours
// (its gateway's MAC is the other tap's). eth0 goes down first, which
// drops its routes and neighbour entries whatever addresses it holds
// (replacing its only address drops them too), then is configured as at
// boot.
absl::Status Readdress(const std::string& value) {
  std::optional<NetConfig> net = ParseNetConfig(value);
  if (!net) {
    return absl::InvalidArgumentError(
        absl::StrCat("network: malformed \"", value, "\" (want <address>/<prefix>,<gateway>)"));
  }
  ScopedFd sock(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!sock) return absl::InternalError(absl::StrCat("network: socket: ", Err()));
  struct ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
  if (ioctl(sock.get(), SIOCGIFFLAGS, &ifr) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("network: eth0: ", Err()));
  }
  ifr.ifr_flags &= ~IFF_UP;
  if (ioctl(sock.get(), SIOCSIFFLAGS, &ifr) != 0) {
    return absl::InternalError(absl::StrCat("network: eth0 down: ", Err()));
  }
  return ConfigureNetwork(*net);
}

// Runs the dsec.run command on the console and waits for it.
void RunCommand(Reaper& reaper, const std::string& command) {
  SpawnSpec spec;
  spec.argv = {"/bin/sh", "-c", command};
  spec.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
              "TERM=linux"};
  spec.cwd = "/";
  absl::StatusOr<std::unique_ptr<Child>> child = reaper.Spawn(spec);
  if (!child.ok()) {
    Console(absl::StrCat("run failed: ", child.status().message()));
    Console("run exit=127");
    return;
  }
  for (;;) {
    pollfd p = {(*child)->wait_fd(), POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) break;
    absl::StatusOr<std::optional<ChildStatus>> st = (*child)->TryCollect();
    if (!st.ok()) break;
    if (st->has_value()) {
      int code = (*st)->exit_code.has_value() ? *(*st)->exit_code : 128 + (*st)->signal.value_or(0);
      Console(absl::StrCat("run exit=", code));
      return;
    }
  }
  Console("run exit=255");
}

absl::StatusOr<ScopedFd> ListenVsock(uint32_t port) {
  ScopedFd fd(socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return absl::UnavailableError(Err());
  sockaddr_vm addr = {};
  addr.svm_family = AF_VSOCK;
  addr.svm_cid = VMADDR_CID_ANY;
  addr.svm_port = port;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd.get(), 64) != 0) {
    return absl::UnavailableError(Err());
  }
  return fd;
}

}  // namespace

void RunPid1() {
  // Before any thread exists: SIGCHLD queues for the reaper's signalfd in
  // every thread, and broken connections are errors, not signals.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  signal(SIGPIPE, SIG_IGN);
  EnsureConsole();
  Console("pid 1 started");
  MountPseudoFilesystems();
  std::string cmdline = ReadSmallFile("/proc/cmdline");
  if (cmdline.empty()) Console("warning: cannot read /proc/cmdline; using defaults");
  BootConfig config = ParseBootConfig(cmdline);
  for (const std::string& w : config.warnings) Console(absl::StrCat("warning: ", w));
  MountPlan plan = BuildMountPlan(config);
  ScopedFd upper = SetupRoot(plan);
  if (!upper) Console("warning: serving from the initial root (no overlay)");
  // A sandbox that asked for a network it cannot have does not come up:
  // the host sees the VM stop, with these lines on its console.
  if (config.net_malformed) PowerOff();
  if (config.net) {
    if (absl::Status s = ConfigureNetwork(*config.net); !s.ok()) {
      Console(absl::StrCat("error: ", s.message()));
      PowerOff();
    }
  }

  absl::StatusOr<std::unique_ptr<Reaper>> reaper = Reaper::Create();
  if (!reaper.ok()) {
    Console(absl::StrCat("error: reaper: ", reaper.status().message()));
    for (;;) pause();
  }
  std::thread reaper_thread([r = reaper->get()] {
    for (;;) r->Run();
  });

  if (config.run.has_value()) RunCommand(**reaper, *config.run);
  if (config.oneshot) PowerOff();

  ServerOptions options;
  options.root = "/";
  if (upper) options.upper = FdPath(upper.get());
  options.launcher = reaper->get();
  options.on_shutdown = [] { PowerOff(); };
  options.set_clock = [](int64_t unix_ns) -> absl::Status {
    struct timespec ts;
    ts.tv_sec = static_cast<time_t>(unix_ns / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(unix_ns % 1'000'000'000);
    if (clock_settime(CLOCK_REALTIME, &ts) != 0) return absl::InternalError(absl::StrCat("clock_settime: ", Err()));
    return absl::OkStatus();
  };
  options.reseed = [](const std::string& seed) { return Reseed(seed); };
  options.configure_network = [](const std::string& net) {
    absl::Status s = Readdress(net);
    if (!s.ok()) Console(absl::StrCat("error: ", s.message()));
    return s;
  };
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(options);
  if (!server.ok()) {
    Console(absl::StrCat("error: server: ", server.status().message()));
  } else if (absl::StatusOr<ScopedFd> listener = ListenVsock(config.port); !listener.ok()) {
    Console(absl::StrCat("no vsock: ", listener.status().message()));
  } else {
    Console(absl::StrCat("listening vsock port=", config.port));
    for (;;) {
      int fd = accept4(listener->get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        (*server)->ServeConnection(ScopedFd(fd));
      } else if (errno != EINTR && errno != ECONNABORTED) {
        Console(absl::StrCat("error: accept: ", Err()));
        break;
      }
    }
  }
  // Nothing left to serve: keep reaping (the reaper thread does) forever.
  reaper_thread.join();
  for (;;) pause();
}

}  // namespace dsec::agent
