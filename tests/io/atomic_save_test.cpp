// Saves that never destroy the last good file (issue 25, items 3 and 5). A forked child saves
// under a file-size limit (setrlimit(RLIMIT_FSIZE), SIGXFSZ ignored: a full disk in miniature);
// the save must fail with an error naming the file, the previous file must be byte-identical,
// and no temporary may be left in the folder. Covers .keras, .weights.h5, checkpoints, ONNX
// export and the shared helper (CostReport, history plots, `convert ... out.json`). Targets that
// are not regular files (a FIFO, a character device) are refused and left as they were; a
// temporary is never written through a link planted at its name. And a real full disk: a small
// tmpfs, filled, where the test can mount one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/hostile_files_util.h"
#include "lockstep/io/checkpoint.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
using test_util::error_of;
namespace fs = std::filesystem;

namespace {

Model model_with_units(int units) {
  KTensor in = Input({16}, "x");
  return Model(in, Dense(units, {.name = "out"})(in), "m");
}

// Runs `save` in a child limited to `limit` bytes per file; returns its error ("" when the
// save succeeded, or the child's crash / hang).
std::string save_over_limit(rlim_t limit, const std::function<void()>& save) {
  const std::string verdict = test_util::in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit r{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &r) != 0) return std::string("setrlimit failed");
    const std::string e = error_of(save);
    return e.empty() ? std::string("SAVED") : "ERROR: " + e;
  });
  return verdict == "SAVED" ? "" : verdict;
}

// The files in `dir` (names), to see that no temporary was left.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Saves a good file with `save_good`, then a bigger one over it with `save_big` under a limit
// the bigger one exceeds; checks the error, the old bytes and the folder.
void expect_failed_save_keeps_old_file(const std::string& name,
                                       const std::function<void(const std::string&)>& save_good,
                                       const std::function<void(const std::string&)>& save_big) {
  const fs::path dir = test_util::temp_dir("atomic_" + name, /*fresh=*/true);
  const std::string path = (dir / name).string();
  save_good(path);
  const std::string before = test_util::read_text_file(path);
  ASSERT_GT(before.size(), 0u);
  const std::string e = save_over_limit(rlim_t(before.size() + 4096), [&] { save_big(path); });
  EXPECT_EQ(e.rfind("ERROR: ", 0), 0u) << name << ": " << (e.empty() ? "the save succeeded" : e);
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_EQ(test_util::read_text_file(path), before) << name << ": the previous file changed";
  EXPECT_EQ(files_in(dir), std::vector<std::string>{name}) << name << ": a temporary was left";
}

}  // namespace

TEST(AtomicSave, KerasSaveOverAFileSizeLimitKeepsThePreviousFile) {
  expect_failed_save_keeps_old_file(
      "m.keras", [](const std::string& p) { model_with_units(4).save(p); },
      [](const std::string& p) { model_with_units(4000).save(p); });
}

TEST(AtomicSave, WeightsSaveOverAFileSizeLimitKeepsThePreviousFile) {
  expect_failed_save_keeps_old_file(
      "w.weights.h5", [](const std::string& p) { model_with_units(4).save_weights(p); },
      [](const std::string& p) { model_with_units(4000).save_weights(p); });
}

TEST(AtomicSave, CheckpointSaveOverAFileSizeLimitKeepsThePreviousFile) {
  expect_failed_save_keeps_old_file(
      "c.lsckpt", [](const std::string& p) { model_with_units(4).save_weights(p); },
      [](const std::string& p) { model_with_units(4000).save_weights(p); });
}

TEST(AtomicSave, OnnxExportOverAFileSizeLimitKeepsThePreviousFile) {
  expect_failed_save_keeps_old_file(
      "m.onnx", [](const std::string& p) { onnx::export_model(model_with_units(4), p); },
      [](const std::string& p) { onnx::export_model(model_with_units(4000), p); });
}

TEST(AtomicSave, SharedHelperOverAFileSizeLimitKeepsThePreviousFile) {
  // The helper behind CostReport files, PNG charts and `lockstep convert ... out.json`.
  expect_failed_save_keeps_old_file(
      "report.json", [](const std::string& p) { write_file_atomic(p, "{}", "report"); },
      [](const std::string& p) { write_file_atomic(p, std::string(100000, ' '), "report"); });
}

TEST(AtomicSave, TargetsThatAreNotRegularFilesAreRefusedAndKept) {
  const fs::path dir = test_util::temp_dir("atomic_special", /*fresh=*/true);
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> saves = {
      {"m.keras", [](const std::string& p) { model_with_units(2).save(p); }},
      {"w.weights.h5", [](const std::string& p) { model_with_units(2).save_weights(p); }},
      {"c.lsckpt", [](const std::string& p) { model_with_units(2).save_weights(p); }},
      {"m.onnx", [](const std::string& p) { onnx::export_model(model_with_units(2), p); }},
      {"report.json", [](const std::string& p) { write_file_atomic(p, "x", "report"); }}};
  for (const auto& [name, save] : saves) {
    const std::string fifo = (dir / ("fifo_" + name)).string();
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string e = test_util::in_child([&] { return error_of([&] { save(fifo); }); }, 20);
    EXPECT_NE(e.find("FIFO"), std::string::npos) << name << ": " << e;
    EXPECT_TRUE(fs::is_fifo(fifo)) << name << ": the FIFO was replaced";
    // A character device node (made here: the kind /dev/full and /dev/null are), as root.
    const std::string dev = (dir / ("dev_" + name)).string();
    if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) continue;
    const std::string d = test_util::in_child([&] { return error_of([&] { save(dev); }); }, 20);
    EXPECT_NE(d.find("character device"), std::string::npos) << name << ": " << d;
    struct stat st {};
    ASSERT_EQ(::stat(dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << name << ": the device node was replaced";
  }
  EXPECT_NE(error_of([&] { write_file_atomic(dir.string(), "x", "report"); }).find("a folder"),
            std::string::npos);
}

TEST(AtomicSave, StreamPathsGetAPlainWrite) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  write_file_atomic("/proc/self/fd/" + std::to_string(fds[1]), "hello", "report");
  char buf[16] = {};
  EXPECT_EQ(::read(fds[0], buf, sizeof buf), 5);
  EXPECT_EQ(std::string(buf), "hello");
  ::close(fds[0]), ::close(fds[1]);
}

TEST(AtomicSave, TemporariesAreNeverWrittenThroughPlantedLinks) {
  const fs::path dir = test_util::temp_dir("atomic_links", /*fresh=*/true);
  const std::string victim = (dir / "victim").string();
  test_util::write_binary(victim, "precious");
  const std::string path = (dir / "m.keras").string();
  // Links at every name a save of this process might pick for its temporaries.
  const std::string pid = std::to_string(::getpid());
  for (int n = 0; n < 64; ++n)
    for (const char* suffix : {"", ".weights.h5", ".zip"})  // this version's names and older ones
      fs::create_symlink(victim, path + ".tmp-" + pid + "-" + std::to_string(n) + suffix);
  fs::create_symlink(victim, path + ".tmp-" + pid);
  fs::create_symlink(victim, dir / ("c.lsckpt.tmp-" + pid));
  model_with_units(2).save(path);
  io::CheckpointFile f;
  f.tensors.push_back({"w", Tensor::full({2}, 1.f)});
  io::write_checkpoint_file((dir / "c.lsckpt").string(), f);
  EXPECT_EQ(test_util::read_text_file(victim), "precious");
  EXPECT_EQ(load_model(path).count_params(), 34);
}

// A full disk for real: a tmpfs mounted small (in a private mount namespace of a forked child,
// so nothing outside sees it) and filled up to the last few KB. Each kind of save that runs out
// of space fails naming the file, the previous file stays byte-identical and no temporary is
// left. Skipped where the process cannot mount one (not root, or no CAP_SYS_ADMIN).
TEST(AtomicSave, SavesOnAFullTmpfsKeepThePreviousFiles) {
  const fs::path dir = test_util::temp_dir("atomic_tmpfs", /*fresh=*/true);
  const std::string verdict = test_util::in_child(
      [&]() -> std::string {
        if (::unshare(CLONE_NEWNS) != 0)
          return std::string("SKIP: cannot make a mount namespace: ") + std::strerror(errno);
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m") != 0)
          return std::string("SKIP: cannot mount a tmpfs: ") + std::strerror(errno);
        using Save = std::function<void(const std::string&, int)>;
        const std::vector<std::pair<std::string, Save>> saves = {
            {"m.keras", [](const std::string& p, int u) { model_with_units(u).save(p); }},
            {"w.weights.h5",
             [](const std::string& p, int u) { model_with_units(u).save_weights(p); }},
            {"c.lsckpt", [](const std::string& p, int u) { model_with_units(u).save_weights(p); }},
            {"r.json", [](const std::string& p, int u) {
               write_file_atomic(p, std::string(size_t(u) * 64, ' '), "report");
             }}};
        for (const auto& [name, save] : saves) save((dir / name).string(), 4);
        std::vector<std::string> before, names{"filler"};
        for (const auto& [name, save] : saves)
          before.push_back(test_util::read_text_file((dir / name).string())), names.push_back(name);
        std::sort(names.begin(), names.end());
        // The filler takes all but 16 KB; each new file needs about 256 KB.
        struct statvfs fs_info;
        if (::statvfs(dir.c_str(), &fs_info) != 0) return std::string("statvfs failed");
        const size_t free_bytes = size_t(fs_info.f_bavail) * fs_info.f_frsize;
        if (free_bytes < 16384) return "the tmpfs is already full: " + std::to_string(free_bytes);
        std::ofstream((dir / "filler").string(), std::ios::binary)
            << std::string(free_bytes - 16384, 'x');
        std::string failures;
        for (size_t i = 0; i < saves.size(); ++i) {
          const std::string path = (dir / saves[i].first).string();
          const std::string e = error_of([&] { saves[i].second(path, 4000); });
          if (e.find(path) == std::string::npos)
            failures += saves[i].first + ": " + (e.empty() ? "saved on a full disk" : e) + "\n";
          if (test_util::read_text_file(path) != before[i])
            failures += saves[i].first + ": the previous file changed\n";
        }
        if (files_in(dir) != names) failures += "a temporary was left in the tmpfs\n";
        return failures;
      },
      60);
  if (verdict.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << verdict.substr(6);
  EXPECT_EQ(verdict, "");
}

// Issue 25 item 10: the final rename itself fails (the target is a mount point: a file
// bind-mounted over it in a private mount namespace of a forked child, so rename(2) says EBUSY).
// The save fails naming the file and the rename, the target keeps its bytes and no temporary
// (the old ".tmp-*.zip" debris) is left in the folder. Skipped without CAP_SYS_ADMIN.
TEST(AtomicSave, AFailedFinalRenameLeavesNoTemporary) {
  const fs::path dir = test_util::temp_dir("atomic_rename", /*fresh=*/true);
  const std::string path = (dir / "m.keras").string();
  const std::string other =
      (dir.parent_path() / ("lockstep_atomic_rename_src_" + std::to_string(::getpid()) + ".keras"))
          .string();
  model_with_units(2).save(other);
  test_util::write_binary(path, "placeholder");
  const std::string verdict = test_util::in_child([&]() -> std::string {
    if (::unshare(CLONE_NEWNS) != 0)
      return std::string("SKIP: cannot make a mount namespace: ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(other.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0)
      return std::string("SKIP: cannot bind-mount: ") + std::strerror(errno);
    const std::string before = test_util::read_text_file(path);
    const std::string e = error_of([&] { model_with_units(40).save(path); });
    std::string problems;
    if (e.find(path) == std::string::npos || e.find("cannot rename") == std::string::npos)
      problems += "error: '" + e + "'; ";
    if (test_util::read_text_file(path) != before) problems += "the target changed; ";
    for (const auto& n : files_in(dir))
      if (n != "m.keras") problems += "left " + n + "; ";
    return problems.empty() ? std::string("OK") : problems;
  });
  fs::remove(other);
  if (verdict.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << verdict.substr(6);
  EXPECT_EQ(verdict, "OK");
  EXPECT_EQ(test_util::read_text_file(path), "placeholder");
}

// Issue 25 item 6: a save that was killed leaves "<target>.tmp-<pid>-<n>"; the next save of that
// target removes it when the process is gone and nobody holds it locked. A live process's
// temporary, another target's and names that are not a save's temporary are kept.
TEST(AtomicSave, SaveRemovesTemporariesOfKilledSavesOnly) {
  const fs::path dir = test_util::temp_dir("atomic_stale", /*fresh=*/true);
  const std::string target = (dir / "m.keras").string();
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ASSERT_GT(dead, 0);
  ::waitpid(dead, nullptr, 0);
  const pid_t alive = ::fork();
  if (alive == 0) {
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(alive, 0);
  const std::string d = std::to_string(dead), a = std::to_string(alive);
  const std::vector<std::string> stale = {target + ".tmp-" + d + "-0",
                                          target + ".tmp-" + d + "-17.zip",
                                          target + ".tmp-" + d + "-3.weights.h5"};
  const std::vector<std::string> kept = {target + ".tmp-" + a + "-0",  // alive
                                         (dir / ("other.keras.tmp-" + d + "-0")).string(),
                                         target + ".tmp-" + d,  // a checkpoint's name pattern
                                         target + ".tmp-" + d + "-x",
                                         target + ".tmp-notapid-0",
                                         target + ".tmp-" + d + "-0.bak"};
  for (const auto& p : stale) test_util::write_binary(p, std::string(4096, 'x'));
  for (const auto& p : kept) test_util::write_binary(p, std::string(4096, 'x'));
  model_with_units(2).save(target);
  for (const auto& p : stale) EXPECT_FALSE(fs::exists(p)) << p << ": a killed save's temporary";
  for (const auto& p : kept) EXPECT_TRUE(fs::exists(p)) << p << ": removed, but not stale";
  EXPECT_EQ(load_model(target).count_params(), 34);
  // A temporary held locked (a save in progress on another host of a shared filesystem, whose
  // PID means nothing here) is kept even though no local process has that PID.
  const std::string locked = target + ".tmp-" + d + "-1";
  test_util::write_binary(locked, "in progress");
  const int fd = ::open(locked.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const pid_t holder = ::fork();  // flock is per open file: a child keeps it after we close
  if (holder == 0) {
    ::flock(fd, LOCK_EX);
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(holder, 0);
  ::close(fd);
  for (int i = 0; i < 2000; ++i) {  // until the child holds the lock
    const int probe = ::open(locked.c_str(), O_RDONLY | O_CLOEXEC);
    const bool held = ::flock(probe, LOCK_EX | LOCK_NB) != 0;
    ::close(probe);
    if (held) break;
    ::usleep(1000);
  }
  model_with_units(2).save(target);
  EXPECT_TRUE(fs::exists(locked)) << "removed a temporary that a process holds locked";
  for (pid_t p : {alive, holder}) ::kill(p, SIGKILL), ::waitpid(p, nullptr, 0);
}
