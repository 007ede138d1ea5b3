// Image inputs that are not what their names say (issue 25, items 6 and 7): a FIFO named x.png
// (given to read_image, or in a class folder), a .png link to /dev/zero, and a class folder
// that cannot be read. Each is an error naming the file or folder, never a hang, an unbounded
// read or "contains no images". Checks run in a child with a deadline, so a hang fails.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "io/hostile_files_util.h"
#include "lockstep/data/image.h"
#include "lockstep/data/image_folder.h"
#include "test_util.h"

using namespace lockstep;
using test_util::error_of;
namespace fs = std::filesystem;

using lockstep::test_util::expect_has;

namespace {

// A class folder layout: root/a/ok.png plus whatever `add` puts in root/b.
fs::path class_folders(const std::string& tag) {
  const fs::path root = test_util::temp_dir("hostile_images_" + tag, /*fresh=*/true);
  fs::create_directories(root / "a");
  fs::create_directories(root / "b");
  data::write_image((root / "a" / "ok.png").string(), Tensor::zeros(Shape{4, 4, 3}, DType::u8));
  data::write_image((root / "b" / "ok.png").string(), Tensor::zeros(Shape{4, 4, 3}, DType::u8));
  return root;
}

data::ImageFolderOptions options() {
  data::ImageFolderOptions o;
  o.image_size = {4, 4};
  o.seed = 1;
  return o;
}

}  // namespace

TEST(HostileImageInputs, FifoNamedLikeAnImageIsAnErrorNotAHang) {
  const fs::path dir = test_util::temp_dir("hostile_images_fifo", /*fresh=*/true);
  const std::string fifo = (dir / "x.png").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_has(test_util::in_child([&] { return error_of([&] { data::read_image(fifo); }); }, 10),
             {fifo, "FIFO", "not a regular file"});
}

TEST(HostileImageInputs, PngLinkToDevZeroIsRefusedUnread) {
  const fs::path dir = test_util::temp_dir("hostile_images_zero", /*fresh=*/true);
  const std::string link = (dir / "zero.png").string();
  fs::create_symlink("/dev/zero", link);
  expect_has(test_util::in_child([&] { return error_of([&] { data::read_image(link); }); }, 10),
             {link, "character device"});
}

TEST(HostileImageInputs, FifoOrDeviceInAClassFolderIsNamedWhenIndexing) {
  const fs::path root = class_folders("fifo_in_class");
  const std::string fifo = (root / "b" / "x.png").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_has(
      test_util::in_child(
          [&] {
            return error_of([&] { data::image_dataset_from_directory(root.string(), options()); });
          },
          20),
      {fifo, "FIFO", "not a regular image file"});
  fs::remove(fifo);
  fs::create_symlink("/dev/zero", root / "b" / "zero.jpg");
  expect_has(error_of([&] { data::index_image_directory(root.string(), options()); }),
             {"zero.jpg", "character device"});
}

TEST(HostileImageInputs, UnreadableClassFolderIsReportedAsUnreadable) {
  const fs::path root = class_folders("unreadable");
  fs::permissions(root / "b", fs::perms::none);
  // Root reads everything: as root, the listing runs as user "nobody" in a child.
  const std::string e = test_util::in_child([&] {
    if (::getuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0))
      return std::string("SKIP");
    return error_of([&] { data::index_image_directory(root.string(), options()); });
  });
  fs::permissions(root / "b", fs::perms::owner_all);
  if (e == "SKIP") GTEST_SKIP() << "cannot drop privileges here";
  expect_has(e, {(root / "b").string(), "cannot read folder", "check its permissions"});
  EXPECT_EQ(e.find("contains no images"), std::string::npos) << e;
}
