// image_dataset_from_directory with follow_links=true: a symlink loop is followed once, not
// until the path gets too long (it used to list 410 files instead of 10, with images of one
// class labelled as another), with a one-line warning; links that are not loops are followed.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/data/image.h"
#include "lockstep/data/image_folder.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {

void write_pngs(const fs::path& dir, int n, uint8_t value) {
  fs::create_directories(dir);
  for (int i = 0; i < n; ++i) {
    Tensor img = Tensor::zeros({4, 4, 3}, DType::u8);
    std::fill_n(img.data<uint8_t>(), 48, value);
    write_image((dir / ("img" + std::to_string(i) + ".png")).string(), img);
  }
}

}  // namespace

TEST(ImageFolderLinks, SymlinkLoopsAreFollowedOnceWithAWarning) {
  const fs::path base = test_util::temp_dir("imgfolder_links", /*fresh=*/true);
  const fs::path root = base / "data";
  write_pngs(root / "a", 5, 10);
  write_pngs(root / "b", 5, 200);
  fs::create_directory_symlink("..", root / "a" / "up");   // a/up -> data (a loop)
  fs::create_directory_symlink(".", root / "b" / "self");  // b/self -> b (a loop)
  ImageFolderOptions o;
  o.verbose = false;
  o.follow_links = true;
  o.shuffle = false;
  o.image_size = {4, 4};
  testing::internal::CaptureStderr();
  ImageFolderIndex idx = index_image_directory(root.string(), o);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(idx.files.size(), 10u);
  EXPECT_EQ(idx.class_names, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(idx.labels.size(), idx.files.size());
  for (size_t i = 0; i < idx.files.size(); ++i) {
    const std::string cls = fs::path(idx.files[i]).parent_path().filename().string();
    EXPECT_EQ(cls, idx.class_names[idx.labels[i]]) << idx.files[i];
  }
  EXPECT_NE(err.find("up"), std::string::npos) << err;
  EXPECT_NE(err.find("self"), std::string::npos) << err;
  EXPECT_NE(err.find("loop"), std::string::npos) << err;
}

TEST(ImageFolderLinks, LinksThatAreNotLoopsAreFollowed) {
  const fs::path base = test_util::temp_dir("imgfolder_links2", /*fresh=*/true);
  const fs::path root = base / "data";
  write_pngs(root / "a", 3, 10);
  write_pngs(root / "b", 3, 200);
  write_pngs(base / "outside", 2, 90);
  fs::create_directory_symlink(base / "outside", root / "b" / "more");
  ImageFolderOptions o;
  o.verbose = false;
  o.shuffle = false;
  o.image_size = {4, 4};
  o.follow_links = true;
  testing::internal::CaptureStderr();
  auto followed = index_image_directory(root.string(), o);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(followed.files.size(), 8u);
  EXPECT_EQ(err, "");
  o.follow_links = false;
  EXPECT_EQ(index_image_directory(root.string(), o).files.size(), 6u);
}
