/* Writes the crafted JPEGs of tests/data/jpeg_limits_test.cpp into tests/fuzz/corpus/image_jpeg
 * (committed; rerun by hand only to change them):
 *   cc tests/data/make_jpeg_cases.c -ljpeg -o /tmp/make_jpeg_cases && /tmp/make_jpeg_cases DIR
 * cmyk_8x8.jpg             an Adobe CMYK JPEG (what a print workflow writes), 8x8
 * progressive_704_scans.jpg a legal 16x16 grayscale progressive JPEG of 704 scans: every AC
 *                          coefficient in its own scan, refined one bit at a time (Al 10..0),
 *                          the pattern that made one 8192x8192 file take 46 s to decode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static void write_cmyk(const char* path) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  FILE* f = fopen(path, "wb");
  unsigned char row[8 * 4];
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = 8, c.image_height = 8, c.input_components = 4, c.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < 8; ++y) {
    for (int x = 0; x < 8; ++x) {
      row[x * 4 + 0] = (unsigned char)(30 * x), row[x * 4 + 1] = (unsigned char)(30 * y);
      row[x * 4 + 2] = 128, row[x * 4 + 3] = 200;
    }
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  fclose(f);
}

static void write_many_scans(const char* path) {
  enum { kAl = 10 };
  static jpeg_scan_info scans[64 * (kAl + 1)];
  int n = 0;
  for (int k = 0; k < 64; ++k)  /* k = 0: DC */
    for (int al = kAl; al >= 0; --al) {
      jpeg_scan_info* s = &scans[n++];
      memset(s, 0, sizeof *s);
      s->comps_in_scan = 1, s->component_index[0] = 0, s->Ss = k, s->Se = k;
      s->Ah = al == kAl ? 0 : al + 1, s->Al = al;
    }
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  FILE* f = fopen(path, "wb");
  unsigned char row[16];
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = 16, c.image_height = 16, c.input_components = 1, c.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  c.scan_info = scans, c.num_scans = n;
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) row[x] = (unsigned char)((x * 37 + y * 11) & 0xff);
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  fclose(f);
  printf("%s: %d scans\n", path, n);
}

int main(int argc, char** argv) {
  char path[4096];
  if (argc != 2) return fprintf(stderr, "usage: make_jpeg_cases DIR\n"), 2;
  snprintf(path, sizeof path, "%s/cmyk_8x8.jpg", argv[1]);
  write_cmyk(path);
  snprintf(path, sizeof path, "%s/progressive_704_scans.jpg", argv[1]);
  write_many_scans(path);
  return 0;
}
