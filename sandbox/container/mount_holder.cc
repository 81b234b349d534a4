// SPDX-License-Identifier: Apache-2.0
#include "sandbox/container/mount_holder.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status.h"

namespace dsec::container {

namespace {

// The holder's mount points live on a tmpfs over /tmp, in its namespace
// only (propagation private): the host's /tmp is untouched.
constexpr char kDir[] = "/tmp";

bool GoodName(const std::string& name) {
  return !name.empty() && name.size() <= 200 && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MountHolder>> MountHolder::Start() {
  std::unique_ptr<MountHolder> h(new MountHolder());
  std::promise<absl::StatusOr<std::string>> ready;
  std::future<absl::StatusOr<std::string>> started = ready.get_future();
  MountHolder* raw = h.get();
  h->thread_ = std::thread([raw, &ready] {
    // CLONE_NEWNS implies CLONE_FS: only this thread changes namespace.
    if (::unshare(CLONE_NEWNS) != 0) {
      ready.set_value(ErrnoToStatus("mount holder: unshare(CLONE_NEWNS)"));
      return;
    }
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ready.set_value(ErrnoToStatus("mount holder: make its mounts private"));
      return;
    }
    if (::mount("dsec-holder", kDir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=0700") != 0) {
      ready.set_value(ErrnoToStatus(absl::StrCat("mount holder: tmpfs on ", kDir)));
      return;
    }
    ready.set_value(absl::StrCat("/proc/", ::getpid(), "/task/", ::gettid(), "/root", kDir));
    raw->Loop();
  });
  absl::StatusOr<std::string> root = started.get();
  if (!root.ok()) {
    h->thread_.join();
    h->thread_ = std::thread();
    return absl::UnavailableError(root.status().message());
  }
  h->root_ = *root;
  return h;
}

MountHolder* MountHolder::Default() {
  static MountHolder* const holder = [] {
    absl::StatusOr<std::unique_ptr<MountHolder>> h = Start();
    if (!h.ok()) {
      DSEC_LOG(warn, "container: no mount holder ({}): writable layers hold a descriptor each",
               h.status().ToString());
      return static_cast<MountHolder*>(nullptr);
    }
    return h->release();  // lives as long as the process
  }();
  return holder;
}

MountHolder::~MountHolder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();  // its namespace and mounts go with it
}

void MountHolder::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !ops_.empty(); });
    if (ops_.empty()) return;  // stopping
    std::function<void()> op = std::move(ops_.front());
    ops_.pop_front();
    lock.unlock();
    op();
    lock.lock();
  }
}

absl::Status MountHolder::Run(std::function<absl::Status()> op) {
  std::promise<absl::Status> done;
  std::future<absl::Status> result = done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return absl::FailedPreconditionError("mount holder: stopped");
    ops_.push_back([&op, &done] { done.set_value(op()); });
  }
  cv_.notify_one();
  return result.get();
}

absl::StatusOr<std::string> MountHolder::Attach(int mount_fd, const std::string& name) {
  if (!GoodName(name)) return absl::InvalidArgumentError(absl::StrCat("mount holder: bad name '", name, "'"));
  const std::string inside = absl::StrCat(kDir, "/", name);
  DSEC_RETURN_IF_ERROR(Run([&]() -> absl::Status {
    if (::mkdir(inside.c_str(), 0700) != 0) {
      if (errno == EEXIST) return absl::AlreadyExistsError(absl::StrCat("mount holder: ", name, " is held"));
      return ErrnoToStatus(absl::StrCat("mount holder: mkdir ", name));
    }
    if (::move_mount(mount_fd, "", AT_FDCWD, inside.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      absl::Status s = ErrnoToStatus(absl::StrCat("mount holder: attach ", name));
      ::rmdir(inside.c_str());
      return s;
    }
    return absl::OkStatus();
  }));
  std::lock_guard<std::mutex> lock(mu_);
  ++held_;
  return absl::StrCat(root_, "/", name);
}

absl::Status MountHolder::Detach(const std::string& name) {
  if (!GoodName(name)) return absl::InvalidArgumentError(absl::StrCat("mount holder: bad name '", name, "'"));
  const std::string inside = absl::StrCat(kDir, "/", name);
  bool was_held = false;
  DSEC_RETURN_IF_ERROR(Run([&]() -> absl::Status {
    if (::umount2(inside.c_str(), MNT_DETACH) == 0) {
      was_held = true;
    } else if (errno != EINVAL && errno != ENOENT) {
      return ErrnoToStatus(absl::StrCat("mount holder: detach ", name));
    }
    if (::rmdir(inside.c_str()) != 0 && errno != ENOENT) {
      return ErrnoToStatus(absl::StrCat("mount holder: rmdir ", name));
    }
    return absl::OkStatus();
  }));
  if (was_held) {
    std::lock_guard<std::mutex> lock(mu_);
    --held_;
  }
  return absl::OkStatus();
}

int MountHolder::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace dsec::container
