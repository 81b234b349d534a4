// SPDX-License-Identifier: Apache-2.0
#include "bench/layers_bench.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "nlohmann/json.hpp"
#include "sandbox/layers/erofs_image.h"
#include "sandbox/layers/fs_util.h"
#include "sandbox/layers/layer_store.h"
#include "base/file_io.h"
#include "base/mount.h"
#include "base/scoped_fd.h"
#include "base/status.h"
#include "base/subprocess.h"

namespace dsec::bench {
namespace {

using layers::JoinPath;

constexpr const char* kLayerNames[] = {"base", "toolkit", "workspace"};
constexpr double kLayerShare[] = {0.6, 0.25, 0.15};
constexpr double kMiB = 1024.0 * 1024.0;
constexpr uint64_t kTmpfsMagic = 0x01021994;

// write_bytes of this process from /proc/self/io. It includes the I/O of
// every child already reaped: the kernel adds a child's accounting to its
// parent's when wait() collects it (wait_task_zombie). So deltas around a
// step that reaps its children count those children exactly once.
uint64_t SelfWriteBytes() {
  auto text = ReadSmallFile("/proc/self/io");
  if (!text.ok()) return 0;
  size_t pos = text->find("\nwrite_bytes: ");
  if (pos == std::string::npos) return 0;
  return std::strtoull(text->c_str() + pos + 14, nullptr, 10);
}

// Writes one layer's tree: directories of ~24 files, sizes log-uniform in
// [100 B, 512 KiB]; 60% text-like (compressible), 40% random (like .so and
// .pyc files).
absl::Status GenerateTree(const std::string& root, uint64_t bytes, std::mt19937_64& rng,
                          uint64_t* files) {
  static const char* kWords[] = {"def ", "return ", "self", ".value", "import ", "os", "(", ")",
                                 ":\n    ", "for ", " in ", "range", "if ", "else", "None", "= ",
                                 "\n", "class ", "Layer", "_", "[", "]", "0", "1", "json", "path"};
  std::uniform_real_distribution<double> log_size(std::log(100.0), std::log(512.0 * 1024));
  std::uniform_int_distribution<int> word(0, static_cast<int>(std::size(kWords)) - 1);
  std::uniform_int_distribution<int> percent(0, 99);
  uint64_t written = 0;
  std::string data;
  for (uint64_t n = 0; written < bytes; ++n) {
    std::string dir = JoinPath(root, absl::StrCat("d", n / 600, "/s", (n / 24) % 25));
    if (n % 24 == 0) {
      for (const std::string& d : {JoinPath(root, absl::StrCat("d", n / 600)), dir}) {
        if (mkdir(d.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir " + d);
      }
    }
    size_t size = static_cast<size_t>(std::exp(log_size(rng)));
    data.clear();
    if (percent(rng) < 60) {
      while (data.size() < size) {
        data += kWords[word(rng)];
        if (percent(rng) < 20) data += std::to_string(rng() % 1000);
      }
      data.resize(size);
    } else {
      data.resize(size);
      for (size_t i = 0; i + 8 <= size; i += 8) {
        uint64_t v = rng();
        std::memcpy(&data[i], &v, 8);
      }
    }
    std::string path = JoinPath(dir, absl::StrCat("f", n, percent(rng) < 60 ? ".py" : ".so"));
    ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() || write(fd.get(), data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
      return ErrnoStatus("write " + path);
    }
    written += size;
    ++*files;
  }
  return absl::OkStatus();
}

// Reads every regular file below `dir`; returns bytes read.
absl::StatusOr<uint64_t> ReadAll(const std::string& dir, std::vector<char>& buf) {
  DSEC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDirectory(dir));
  uint64_t total = 0;
  for (const auto& n : names) {
    std::string path = JoinPath(dir, n);
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return ErrnoStatus("lstat " + path);
    if (S_ISDIR(st.st_mode)) {
      DSEC_ASSIGN_OR_RETURN(uint64_t sub, ReadAll(path, buf));
      total += sub;
    } else if (S_ISREG(st.st_mode)) {
      ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!fd.valid()) return ErrnoStatus("open " + path);
      ssize_t r;
      while ((r = read(fd.get(), buf.data(), buf.size())) > 0) total += static_cast<uint64_t>(r);
      if (r < 0) return ErrnoStatus("read " + path);
    }
  }
  return total;
}

struct Cost {
  double seconds = 0;
  uint64_t write_bytes = 0;
  Cost& operator+=(const Cost& o) {
    seconds += o.seconds;
    write_bytes += o.write_bytes;
    return *this;
  }
};

// Mounts `images` (bottom first) and an overlay of them in a child process
// with its own mount namespace, reads every file, and exits: nothing stays
// mounted whatever happens. Cost includes the fork and the child's writes.
// (A fork running this code, not base/subprocess: nothing is exec'ed.)
absl::StatusOr<Cost> MountAndReadAll(const std::vector<std::string>& images, const std::string& mnt) {
  uint64_t w0 = SelfWriteBytes();
  double t0 = MonotonicNowS();
  fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork");
  if (pid == 0) {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      _exit(10);
    }
    std::vector<Mount> mounts;
    std::vector<std::string> lowers;
    for (size_t i = 0; i < images.size(); ++i) {
      std::string target = JoinPath(mnt, absl::StrCat("l", i));
      if (mkdir(target.c_str(), 0755) != 0 && errno != EEXIST) _exit(11);
      auto m = layers::MountErofsFile(images[i], target);
      if (!m.ok()) {
        std::fprintf(stderr, "bench layers: %s\n", m.status().ToString().c_str());
        _exit(12);
      }
      mounts.push_back(*std::move(m));
      lowers.insert(lowers.begin(), target);
    }
    std::string root = JoinPath(mnt, "root");
    if (mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) _exit(13);
    auto overlay = layers::MountOverlay(lowers, "", "", root);
    if (!overlay.ok()) _exit(14);
    std::vector<char> buf(1 << 20);
    _exit(ReadAll(root, buf).ok() ? 0 : 15);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return ErrnoStatus("wait4");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat("mount-and-read child failed, status ", status));
  }
  return Cost{MonotonicNowS() - t0, SelfWriteBytes() - w0};
}

absl::StatusOr<Cost> BuildErofs(layers::LayerStore& store, const std::string& src, const char* name,
                                std::vector<std::string> parents, const std::string& compression,
                                std::string* digest) {
  uint64_t self0 = SelfWriteBytes();
  double t0 = MonotonicNowS();
  layers::BuildRequest req{name, "1", std::move(parents), "", compression};
  DSEC_ASSIGN_OR_RETURN(layers::BuildResult r, store.Build(src, req));
  *digest = r.layer.digest;
  return Cost{MonotonicNowS() - t0, SelfWriteBytes() - self0};
}

absl::StatusOr<Cost> RunTar(const std::string& tar, std::vector<std::string> args) {
  args.insert(args.begin(), tar);
  uint64_t w0 = SelfWriteBytes();
  double t0 = MonotonicNowS();
  SpawnOptions tar_run;
  tar_run.argv = std::move(args);
  tar_run.err = Stdio::Capture();
  DSEC_RETURN_IF_ERROR(RunSubprocessChecked(tar_run).status());
  return Cost{MonotonicNowS() - t0, SelfWriteBytes() - w0};
}

absl::StatusOr<Cost> PackTarGz(const std::string& tar, const std::string& src, const std::string& out) {
  return RunTar(tar, {"--numeric-owner", "--xattrs", "-C", src, "-czf", out, "."});
}

// Extracts every archive (bottom first) into a fresh `root`.
absl::StatusOr<Cost> ExtractAll(const std::string& tar, const std::vector<std::string>& archives,
                                const std::string& root) {
  DSEC_RETURN_IF_ERROR(layers::RemoveTree(root));
  if (mkdir(root.c_str(), 0755) != 0) return ErrnoStatus("mkdir " + root);
  Cost total;
  for (const auto& a : archives) {
    DSEC_ASSIGN_OR_RETURN(Cost c, RunTar(tar, {"--numeric-owner", "--xattrs", "-C", root, "-xzf", a}));
    total += c;
  }
  return total;
}

// One EROFS variant: its own store (uncompressed and compressed layers of
// the same tree have different digests anyway) and image paths.
struct ErofsVariant {
  std::string compression;
  std::string store_dir;
  Cost full, rebuild;
  uint64_t image_bytes = 0;
};

struct Results {
  ErofsVariant plain, packed;
  Cost targz, rebuild_targz;
  uint64_t files = 0, tree_bytes = 0, archive_bytes = 0;
};

// Builds the three layers of `v` (full) and makes a root from them.
absl::Status RunErofsFull(const std::vector<std::string>& src, const std::string& mnt, ErofsVariant* v,
                          layers::LayerStore* store, std::string digest[3]) {
  std::vector<std::string> images(3);
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> parents;
    if (i == 1) parents.push_back(digest[0]);  // the toolkit is a diff on base
    DSEC_ASSIGN_OR_RETURN(Cost c, BuildErofs(*store, src[i], kLayerNames[i], parents, v->compression, &digest[i]));
    v->full += c;
    images[i] = store->ImagePath(digest[i]);
    struct stat st;
    if (stat(images[i].c_str(), &st) == 0) v->image_bytes += static_cast<uint64_t>(st.st_size);
  }
  DSEC_ASSIGN_OR_RETURN(Cost mount_cost, MountAndReadAll(images, mnt));
  v->full += mount_cost;
  return absl::OkStatus();
}

// The toolkit changed: rebuild that layer of `v` and make a fresh root.
absl::Status RunErofsRebuild(const std::vector<std::string>& src, const std::string& mnt, ErofsVariant* v,
                             layers::LayerStore* store, std::string digest[3]) {
  DSEC_ASSIGN_OR_RETURN(Cost rb, BuildErofs(*store, src[1], kLayerNames[1], {digest[0]}, v->compression, &digest[1]));
  v->rebuild += rb;
  std::vector<std::string> images;
  for (int i = 0; i < 3; ++i) images.push_back(store->ImagePath(digest[i]));
  DSEC_ASSIGN_OR_RETURN(Cost rm, MountAndReadAll(images, mnt));
  v->rebuild += rm;
  return absl::OkStatus();
}

absl::Status Run(const LayersBenchOptions& o, const std::string& work, Results* res) {
  std::mt19937_64 rng(o.seed);
  std::vector<std::string> src, archives;
  for (int i = 0; i < 3; ++i) {
    src.push_back(JoinPath(work, absl::StrCat("src/", kLayerNames[i])));
    archives.push_back(JoinPath(work, absl::StrCat("tgz/", kLayerNames[i], ".tar.gz")));
  }
  for (const char* d : {"src", "tgz", "mnt"}) {
    if (mkdir(JoinPath(work, d).c_str(), 0755) != 0) return ErrnoStatus("mkdir");
  }
  for (int i = 0; i < 3; ++i) {
    if (mkdir(src[i].c_str(), 0755) != 0) return ErrnoStatus("mkdir " + src[i]);
    uint64_t bytes = static_cast<uint64_t>(static_cast<double>(o.total_mib) * kMiB * kLayerShare[i]);
    DSEC_RETURN_IF_ERROR(GenerateTree(src[i], bytes, rng, &res->files));
    res->tree_bytes += bytes;
  }
  ErofsVariant* variants[] = {&res->plain, &res->packed};
  res->plain.store_dir = JoinPath(work, "store");
  res->packed.store_dir = JoinPath(work, "store-z");
  std::vector<layers::LayerStore> stores;
  for (ErofsVariant* v : variants) {
    layers::LayerStoreOptions so;
    so.root = v->store_dir;
    so.mkfs = o.mkfs;
    DSEC_ASSIGN_OR_RETURN(layers::LayerStore store, layers::LayerStore::Create(so));
    stores.push_back(std::move(store));
  }
  const std::string mnt = JoinPath(work, "mnt");
  std::string digest[2][3];
  // Full: build all three layers in each format, then make a root.
  for (int k = 0; k < 2; ++k) {
    DSEC_RETURN_IF_ERROR(RunErofsFull(src, mnt, variants[k], &stores[k], digest[k]));
  }
  for (int i = 0; i < 3; ++i) {
    DSEC_ASSIGN_OR_RETURN(Cost t, PackTarGz(o.tar, src[i], archives[i]));
    res->targz += t;
    struct stat st;
    if (stat(archives[i].c_str(), &st) == 0) res->archive_bytes += static_cast<uint64_t>(st.st_size);
  }
  DSEC_ASSIGN_OR_RETURN(Cost extract_cost, ExtractAll(o.tar, archives, JoinPath(work, "root")));
  res->targz += extract_cost;

  // Rebuild: the toolkit changes (a new file and a rewritten one).
  std::mt19937_64 rng2(o.seed + 1);
  uint64_t more_files = 0;
  std::string extra = JoinPath(src[1], "upgrade");
  if (mkdir(extra.c_str(), 0755) != 0) return ErrnoStatus("mkdir " + extra);
  DSEC_RETURN_IF_ERROR(GenerateTree(extra, 1 << 20, rng2, &more_files));
  for (int k = 0; k < 2; ++k) {
    DSEC_RETURN_IF_ERROR(RunErofsRebuild(src, mnt, variants[k], &stores[k], digest[k]));
  }
  if (unlink(archives[1].c_str()) != 0) return ErrnoStatus("unlink " + archives[1]);
  DSEC_ASSIGN_OR_RETURN(Cost rt, PackTarGz(o.tar, src[1], archives[1]));
  res->rebuild_targz += rt;
  DSEC_ASSIGN_OR_RETURN(Cost rx, ExtractAll(o.tar, archives, JoinPath(work, "root2")));
  res->rebuild_targz += rx;
  return absl::OkStatus();
}

}  // namespace

std::string PickBenchCompressor(const std::vector<std::string>& available) {
  for (const char* preferred : {"lz4", "lz4hc", "deflate", "lzma"}) {
    if (std::find(available.begin(), available.end(), preferred) != available.end()) return preferred;
  }
  return available.empty() ? std::string() : available.front();
}

int RunLayersBench(const LayersBenchOptions& o) {
  struct statfs fs;
  if (statfs(o.work_dir.c_str(), &fs) != 0) {
    std::fprintf(stderr, "bench layers: %s: %s\n", o.work_dir.c_str(), strerror(errno));
    return 2;
  }
  if (static_cast<uint64_t>(fs.f_type) == kTmpfsMagic) {
    std::fprintf(stderr, "bench layers: %s is tmpfs, which accounts no bytes written; use --work-dir\n",
                 o.work_dir.c_str());
    return 2;
  }
  std::string compression = o.compression;
  if (compression.empty()) {
    auto available = layers::AvailableErofsCompressors(o.mkfs);
    if (!available.ok()) {
      std::fprintf(stderr, "bench layers: %s\n", available.status().ToString().c_str());
      return 1;
    }
    compression = PickBenchCompressor(*available);
  }
  absl::Status usable = layers::CheckCompressionAvailable(compression, o.mkfs);
  if (usable.ok() && !layers::IsCompressed(compression)) {
    usable = absl::InvalidArgumentError("--compress none: the compressed variant needs a compressor");
  }
  if (!usable.ok()) {
    std::fprintf(stderr, "bench layers: %s\n", usable.ToString().c_str());
    return 2;
  }
  auto work = layers::MakeTempDir(o.work_dir, "dsec-bench-layers-");
  if (!work.ok()) {
    std::fprintf(stderr, "bench layers: %s\n", work.status().ToString().c_str());
    return 1;
  }
  Results r;
  r.plain.compression = layers::kNoCompression;
  r.packed.compression = compression;
  absl::Status s = Run(o, *work, &r);
  absl::Status cleanup = layers::RemoveTree(*work);
  if (!s.ok() || !cleanup.ok()) {
    std::fprintf(stderr, "bench layers: %s\n", (s.ok() ? cleanup : s).ToString().c_str());
    return 1;
  }
  auto mib = [](uint64_t b) { return static_cast<double>(b) / kMiB; };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const ErofsVariant& p = r.plain;
  const ErofsVariant& z = r.packed;
  nlohmann::json j = {
      {"files", r.files},
      {"tree_mib", mib(r.tree_bytes)},
      {"compression", z.compression},
      {"erofs_image_mib", mib(p.image_bytes)},
      {"erofs_z_image_mib", mib(z.image_bytes)},
      {"targz_archive_mib", mib(r.archive_bytes)},
      // Uncompressed (DAX-capable) EROFS: the keys the issue names.
      {"erofs_s", p.full.seconds},
      {"targz_s", r.targz.seconds},
      {"erofs_write_mib", mib(p.full.write_bytes)},
      {"targz_write_mib", mib(r.targz.write_bytes)},
      {"speedup", ratio(r.targz.seconds, p.full.seconds)},
      {"write_ratio", ratio(mib(r.targz.write_bytes), mib(p.full.write_bytes))},
      // Compressed EROFS (container tier).
      {"erofs_z_s", z.full.seconds},
      {"erofs_z_write_mib", mib(z.full.write_bytes)},
      {"speedup_z", ratio(r.targz.seconds, z.full.seconds)},
      {"write_ratio_z", ratio(mib(r.targz.write_bytes), mib(z.full.write_bytes))},
      {"rebuild_erofs_s", p.rebuild.seconds},
      {"rebuild_targz_s", r.rebuild_targz.seconds},
      {"rebuild_erofs_write_mib", mib(p.rebuild.write_bytes)},
      {"rebuild_targz_write_mib", mib(r.rebuild_targz.write_bytes)},
      {"rebuild_speedup", ratio(r.rebuild_targz.seconds, p.rebuild.seconds)},
      {"rebuild_write_ratio", ratio(mib(r.rebuild_targz.write_bytes), mib(p.rebuild.write_bytes))},
      {"rebuild_erofs_z_s", z.rebuild.seconds},
      {"rebuild_erofs_z_write_mib", mib(z.rebuild.write_bytes)},
      {"rebuild_speedup_z", ratio(r.rebuild_targz.seconds, z.rebuild.seconds)},
      {"rebuild_write_ratio_z", ratio(mib(r.rebuild_targz.write_bytes), mib(z.rebuild.write_bytes))},
  };
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench layers: base + toolkit + workspace, %llu files, %.1f MiB (EROFS images %.1f MiB, "
              "EROFS %s images %.1f MiB, tar.gz %.1f MiB)\n",
              static_cast<unsigned long long>(r.files), mib(r.tree_bytes), mib(p.image_bytes),
              z.compression.c_str(), mib(z.image_bytes), mib(r.archive_bytes));
  std::printf("  EROFS = uncompressed (DAX-capable, microVM pmem); EROFS-z = compressed with %s "
              "(container tier only)\n",
              z.compression.c_str());
  auto row = [&](const char* what, const char* variant, const Cost& e, const Cost& t) {
    std::printf("  %-24s %-7s %7.2f s %8.1f MiB written | tar.gz %7.2f s %8.1f MiB | %.2fx faster, "
                "%.2fx fewer bytes\n",
                what, variant, e.seconds, mib(e.write_bytes), t.seconds, mib(t.write_bytes),
                ratio(t.seconds, e.seconds), ratio(mib(t.write_bytes), mib(e.write_bytes)));
  };
  row("build all + make root", "EROFS", p.full, r.targz);
  row("", "EROFS-z", z.full, r.targz);
  row("toolkit changed: rebuild", "EROFS", p.rebuild, r.rebuild_targz);
  row("", "EROFS-z", z.rebuild, r.rebuild_targz);
  std::printf("  (bytes written: write_bytes of /proc/self/io, reaped children included;"
              " writeback not timed)\n");
  return 0;
}

}  // namespace dsec::bench
