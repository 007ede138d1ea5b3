// Image codecs: pixel values of files the test writes (PNG/BMP exact, JPEG within a
// tolerance), Keras colour conversions, and errors that name the file.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lockstep/data/image.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {

std::string tmp_path(const std::string& name) {
  return (test_util::temp_dir("imgcodec") / name).string();
}

Tensor make_u8(int h, int w, int c, uint32_t seed) {
  Tensor t = Tensor::empty({h, w, c}, DType::u8);
  uint8_t* p = t.data<uint8_t>();
  uint32_t s = seed;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = uint8_t(s >> 24);
  }
  return t;
}

// A smooth image (JPEG-friendly): gradients plus a soft bump.
Tensor smooth_rgb(int h, int w) {
  Tensor t = Tensor::empty({h, w, 3}, DType::u8);
  uint8_t* p = t.data<uint8_t>();
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      float r = 40 + 160.f * x / (w - 1);
      float g = 30 + 180.f * y / (h - 1);
      float b = 128 + 80 * std::sin(x * 0.15f) * std::cos(y * 0.1f);
      uint8_t* q = p + (y * w + x) * 3;
      q[0] = uint8_t(r);
      q[1] = uint8_t(g);
      q[2] = uint8_t(b);
    }
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const uint8_t* p = t.data<uint8_t>();
  return {p, p + t.numel()};
}

double mean_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const uint8_t *p = a.data<uint8_t>(), *q = b.data<uint8_t>();
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += std::abs(int(p[i]) - int(q[i]));
  return s / double(a.numel());
}

// A hand-made PNG: IHDR, optional PLTE/tRNS, one IDAT of filter-0 rows, IEND.
void put32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}
void chunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& data) {
  put32(png, uint32_t(data.size()));
  std::vector<uint8_t> td(type, type + 4);
  td.insert(td.end(), data.begin(), data.end());
  png.insert(png.end(), td.begin(), td.end());
  put32(png, uint32_t(crc32(0, td.data(), uInt(td.size()))));
}
std::vector<uint8_t> make_png(int w, int h, int depth, int color_type,
                              const std::vector<uint8_t>& rows_no_filter,
                              const std::vector<uint8_t>& plte = {},
                              const std::vector<uint8_t>& trns = {}) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::vector<uint8_t> ihdr;
  put32(ihdr, uint32_t(w));
  put32(ihdr, uint32_t(h));
  ihdr.insert(ihdr.end(), {uint8_t(depth), uint8_t(color_type), 0, 0, 0});
  chunk(png, "IHDR", ihdr);
  if (!plte.empty()) chunk(png, "PLTE", plte);
  if (!trns.empty()) chunk(png, "tRNS", trns);
  const size_t row = rows_no_filter.size() / size_t(h);
  std::vector<uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rows_no_filter.begin() + y * row, rows_no_filter.begin() + (y + 1) * row);
  }
  uLongf len = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(len);
  compress(z.data(), &len, raw.data(), uLong(raw.size()));
  z.resize(len);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

using lockstep::test_util::error_of;

}  // namespace

TEST(ImageCodec, DetectsFormatByMagicBytes) {
  auto png = encode_png(make_u8(2, 2, 3, 1));
  auto jpg = encode_jpeg(make_u8(8, 8, 3, 1));
  auto bmp = encode_bmp(make_u8(2, 2, 3, 1));
  EXPECT_EQ(detect_image_format(png.data(), png.size()), ImageFormat::png);
  EXPECT_EQ(detect_image_format(jpg.data(), jpg.size()), ImageFormat::jpeg);
  EXPECT_EQ(detect_image_format(bmp.data(), bmp.size()), ImageFormat::bmp);
  const uint8_t text[] = "hello";
  EXPECT_EQ(detect_image_format(text, 5), ImageFormat::unknown);
  // A PNG named .jpg decodes as PNG.
  auto path = tmp_path("really_png.jpg");
  write_file_bytes(path, png);
  EXPECT_EQ(read_image(path).shape(), (Shape{2, 2, 3}));
}

TEST(ImageCodec, PngRoundTripIsExactForEveryChannelCount) {
  for (int c = 1; c <= 4; ++c) {
    Tensor img = make_u8(7, 5, c, 100 + c);
    auto bytes = encode_png(img);
    Tensor back = decode_png(bytes.data(), bytes.size(), "mem.png");
    ASSERT_EQ(back.shape(), (Shape{7, 5, c})) << c;
    EXPECT_EQ(bytes_of(back), bytes_of(img)) << c << " channels";
  }
}

TEST(ImageCodec, Png16BitIsScaledTo8Bit) {
  // 2x1 RGB, 16-bit: (0x0000, 0x8080, 0xFFFF), (0x1234, 0xABCD, 0x0101)
  std::vector<uint16_t> v = {0x0000, 0x8080, 0xFFFF, 0x1234, 0xABCD, 0x0101};
  std::vector<uint8_t> rows;
  for (uint16_t s : v) rows.insert(rows.end(), {uint8_t(s >> 8), uint8_t(s & 0xFF)});
  auto png = make_png(2, 1, 16, 2, rows);
  Tensor t = decode_image(png, "sixteen.png");
  ASSERT_EQ(t.shape(), (Shape{1, 2, 3}));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(t.data<uint8_t>()[i], v[i] / 257.0, 0.51) << i;
  // 16-bit gray + alpha
  std::vector<uint8_t> ga = {0x40, 0x40, 0xFF, 0xFF};
  Tensor g = decode_image(make_png(1, 1, 16, 4, ga), "ga16.png");
  ASSERT_EQ(g.shape(), (Shape{1, 1, 2}));
  EXPECT_EQ(g.data<uint8_t>()[0], 0x40);
  EXPECT_EQ(g.data<uint8_t>()[1], 0xFF);
}

TEST(ImageCodec, PngPaletteGrayAlphaAndTransparency) {
  std::vector<uint8_t> plte = {255, 0, 0, 0, 255, 0, 10, 20, 30};
  auto png = make_png(3, 1, 8, 3, {2, 0, 1}, plte);
  Tensor t = decode_image(png, "palette.png");
  ASSERT_EQ(t.shape(), (Shape{1, 3, 3}));
  EXPECT_EQ(bytes_of(t), (std::vector<uint8_t>{10, 20, 30, 255, 0, 0, 0, 255, 0}));
  // Palette with tRNS: RGBA, alpha from tRNS (entries past it are opaque).
  Tensor ta = decode_image(make_png(3, 1, 8, 3, {2, 0, 1}, plte, {0, 128}), "trns.png");
  ASSERT_EQ(ta.shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(bytes_of(ta), (std::vector<uint8_t>{10, 20, 30, 255, 255, 0, 0, 0, 0, 255, 0, 128}));
  // 8-bit gray + alpha
  Tensor ga = decode_image(make_png(2, 1, 8, 4, {7, 200, 99, 5}), "ga.png");
  ASSERT_EQ(ga.shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(bytes_of(ga), (std::vector<uint8_t>{7, 200, 99, 5}));
  // 1-bit gray expands to 0/255
  Tensor bw = decode_image(make_png(8, 1, 1, 0, {0xA0}), "bits.png");
  ASSERT_EQ(bw.shape(), (Shape{1, 8, 1}));
  EXPECT_EQ(bytes_of(bw), (std::vector<uint8_t>{255, 0, 255, 0, 0, 0, 0, 0}));
}

TEST(ImageCodec, JpegRoundTripWithinTolerance) {
  Tensor img = smooth_rgb(48, 64);
  auto bytes = encode_jpeg(img, 95);
  Tensor back = decode_jpeg(bytes.data(), bytes.size(), "q95.jpg");
  ASSERT_EQ(back.shape(), (Shape{48, 64, 3}));
  EXPECT_LT(mean_abs_diff(back, img), 3.0);
  // Grayscale JPEG stays one channel.
  Tensor gray = convert_channels(img, 1);
  auto gbytes = encode_jpeg(gray, 95);
  Tensor gback = decode_image(gbytes, "gray.jpg");
  ASSERT_EQ(gback.shape(), (Shape{48, 64, 1}));
  EXPECT_LT(mean_abs_diff(gback, gray), 2.0);
  // Decoding a colour JPEG as grayscale gives the 601 luma.
  Tensor as_gray = decode_image(bytes, "q95.jpg", ColorMode::grayscale);
  ASSERT_EQ(as_gray.shape(), (Shape{48, 64, 1}));
  EXPECT_LT(mean_abs_diff(as_gray, gray), 3.0);
  // Lower quality: smaller file, larger error.
  auto q30 = encode_jpeg(img, 30);
  EXPECT_LT(q30.size(), bytes.size());
}

TEST(ImageCodec, BmpRoundTripAndTopDown) {
  for (int c : {3, 4}) {
    Tensor img = make_u8(3, 5, c, 7 + c);  // width 5: 24-bit rows need padding
    auto bytes = encode_bmp(img);
    Tensor back = decode_image(bytes, "img.bmp");
    ASSERT_EQ(back.shape(), (Shape{3, 5, c}));
    EXPECT_EQ(bytes_of(back), bytes_of(img)) << c;
  }
  // Flip to top-down: negative height and reversed rows.
  Tensor img = make_u8(2, 1, 3, 3);
  auto b = encode_bmp(img);
  int32_t neg = -2;
  std::memcpy(&b[22], &neg, 4);
  std::vector<uint8_t> r0(b.begin() + 54, b.begin() + 58), r1(b.begin() + 58, b.begin() + 62);
  std::copy(r1.begin(), r1.end(), b.begin() + 54);
  std::copy(r0.begin(), r0.end(), b.begin() + 58);
  EXPECT_EQ(bytes_of(decode_image(b, "topdown.bmp")), bytes_of(img));
}

TEST(ImageCodec, KerasColorConversions) {
  Tensor rgb = Tensor::empty({1, 2, 3}, DType::u8);
  uint8_t v[] = {10, 200, 30, 255, 255, 255};
  std::memcpy(rgb.raw(), v, 6);
  // grayscale: 0.299 R + 0.587 G + 0.114 B = 123.81 -> 124
  EXPECT_EQ(bytes_of(convert_channels(rgb, 1)), (std::vector<uint8_t>{124, 255}));
  EXPECT_EQ(bytes_of(convert_channels(rgb, 4)),
            (std::vector<uint8_t>{10, 200, 30, 255, 255, 255, 255, 255}));
  Tensor gray = Tensor::empty({1, 1, 1}, DType::u8);
  gray.data<uint8_t>()[0] = 77;
  EXPECT_EQ(bytes_of(convert_channels(gray, 3)), (std::vector<uint8_t>{77, 77, 77}));
  EXPECT_EQ(bytes_of(convert_channels(gray, 4)), (std::vector<uint8_t>{77, 77, 77, 255}));
  Tensor rgba = Tensor::empty({1, 1, 4}, DType::u8);
  uint8_t a[] = {1, 2, 3, 4};
  std::memcpy(rgba.raw(), a, 4);
  EXPECT_EQ(bytes_of(convert_channels(rgba, 3)), (std::vector<uint8_t>{1, 2, 3}));
  Tensor ga = Tensor::empty({1, 1, 2}, DType::u8);
  ga.data<uint8_t>()[0] = 9;
  ga.data<uint8_t>()[1] = 8;
  EXPECT_EQ(bytes_of(convert_channels(ga, 4)), (std::vector<uint8_t>{9, 9, 9, 8}));
  EXPECT_EQ(bytes_of(convert_channels(ga, 1)), (std::vector<uint8_t>{9}));
  // The same conversions through decode with a color mode.
  auto png = encode_png(rgb);
  EXPECT_EQ(decode_image(png, "m.png", ColorMode::grayscale).shape(), (Shape{1, 2, 1}));
  EXPECT_EQ(decode_image(png, "m.png", ColorMode::rgba).shape(), (Shape{1, 2, 4}));
  EXPECT_EQ(parse_color_mode("rgb"), ColorMode::rgb);
  EXPECT_NE(error_of([] { parse_color_mode("cmyk"); }).find("color_mode"), std::string::npos);
}

TEST(ImageCodec, ErrorsNameTheFileAndTheProblem) {
  Tensor img = smooth_rgb(32, 32);
  auto jpg = encode_jpeg(img, 90);
  auto trunc_path = tmp_path("truncated.jpg");
  write_file_bytes(trunc_path, std::vector<uint8_t>(jpg.begin(), jpg.begin() + jpg.size() / 2));
  std::string e = error_of([&] { read_image(trunc_path); });
  EXPECT_NE(e.find(trunc_path), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  auto png = encode_png(img);
  png[png.size() / 2] ^= 0xFF;  // breaks the IDAT CRC / zlib stream
  auto corrupt_path = tmp_path("corrupt.png");
  write_file_bytes(corrupt_path, png);
  e = error_of([&] { read_image(corrupt_path); });
  EXPECT_NE(e.find(corrupt_path), std::string::npos) << e;
  EXPECT_NE(e.find("corrupt"), std::string::npos) << e;

  auto text_path = tmp_path("notes.jpg");
  std::ofstream(text_path) << "this is not an image\n";
  e = error_of([&] { read_image(text_path); });
  EXPECT_NE(e.find(text_path), std::string::npos) << e;
  EXPECT_NE(e.find("not a JPEG, PNG or BMP"), std::string::npos) << e;

  auto empty_path = tmp_path("empty.png");
  std::ofstream(empty_path).close();
  e = error_of([&] { read_image(empty_path); });
  EXPECT_NE(e.find("empty"), std::string::npos) << e;

  e = error_of([&] { read_image(tmp_path("missing.png")); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;

  auto trunc_bmp = encode_bmp(img);
  trunc_bmp.resize(trunc_bmp.size() - 100);
  e = error_of([&] { decode_image(trunc_bmp, "short.bmp"); });
  EXPECT_NE(e.find("short.bmp"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  // A failed JPEG leaves the decoder usable for the next file on this thread.
  for (size_t cut : {size_t(40), jpg.size() / 2, jpg.size() - 3}) {
    std::vector<uint8_t> part(jpg.begin(), jpg.begin() + cut);
    EXPECT_THROW(decode_image(part, "cut.jpg"), Error) << cut;
    EXPECT_LT(mean_abs_diff(decode_image(jpg, "whole.jpg"), img), 4.0) << cut;
  }

  e = error_of([&] { encode_jpeg(make_u8(4, 4, 4, 1)); });
  EXPECT_NE(e.find("1 or 3 channels"), std::string::npos) << e;
}

// read_image's error for `path`, read in a child process that first drops root privileges
// (to nobody) when the test runs as root: root reads a chmod-000 file, an unprivileged user
// cannot. Returns "<setuid failed>" when the privileges cannot be dropped.
static std::string read_error_unprivileged(const std::string& path) {
  if (::geteuid() != 0) return error_of([&] { read_image(path); });
  int fds[2];
  if (::pipe(fds) != 0) return "<pipe failed>";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg;
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0 ||
        ::geteuid() == 0)
      msg = "<setuid failed>";
    else
      msg = error_of([&] { read_image(path); });
    ssize_t ignored = ::write(fds[1], msg.data(), msg.size());
    (void)ignored;
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t k; (k = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, size_t(k));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return msg;
}

TEST(ImageCodec, UnreadableFileIsAClearError) {
  // A file its reader may not open (run as root, the read happens in a child that dropped to
  // nobody; the directory must let nobody reach the file).
  fs::path dir = test_util::temp_dir("imgcodec_perm");
  fs::permissions(dir, fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
  auto path = (dir / "locked.png").string();
  write_file_bytes(path, encode_png(make_u8(2, 2, 3, 1)));
  ::chmod(path.c_str(), 0);
  std::string e = read_error_unprivileged(path);
  ::chmod(path.c_str(), 0644);
  ASSERT_NE(e, "<setuid failed>") << "cannot drop root privileges to test an unreadable file";
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("cannot read"), std::string::npos) << e;
  EXPECT_NE(e.find("Permission denied"), std::string::npos) << e;

  // A path nobody can open, root included: a UNIX socket exists and is no directory, but
  // open() fails (ENXIO).
  auto sock_path = tmp_path("socket.png");
  ::unlink(sock_path.c_str());
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock_path.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0)
      << std::strerror(errno);
  e = error_of([&] { read_image(sock_path); });
  ::close(sock);
  ::unlink(sock_path.c_str());
  EXPECT_NE(e.find(sock_path), std::string::npos) << e;
  EXPECT_NE(e.find("cannot read"), std::string::npos) << e;

  // Missing files and directories name the path too.
  e = error_of([&] { read_image(tmp_path("missing.png")); });
  EXPECT_NE(e.find(tmp_path("missing.png")), std::string::npos) << e;
  e = error_of([&] { read_image(dir.string()); });
  EXPECT_NE(e.find(dir.string()), std::string::npos) << e;
}

TEST(ImageCodec, WriteImageByExtensionAndFloatInput) {
  Tensor f = Tensor::from_vector({1, 2, 1}, {-3.f, 300.f});
  auto path = tmp_path("f.png");
  write_image(path, f);
  Tensor back = read_image(path);
  EXPECT_EQ(bytes_of(back), (std::vector<uint8_t>{0, 255}));
  EXPECT_NE(error_of([&] { write_image(tmp_path("x.gif"), f); }).find("extension"),
            std::string::npos);
}
