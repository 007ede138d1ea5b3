// The RGB drawing surface of the charts (chart.cpp) and the history plot (history_plot.cpp): a
// white [height, width, 3] uint8 image with clipped pixels, filled rectangles, thick Bresenham
// lines and 5x7 text.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lockstep/core/tensor.h"
#include "lockstep/viz/grid.h"

namespace lockstep::viz {

struct Canvas {
  Tensor image;
  int width, height;
  Canvas(int w, int h) : image(Tensor::empty(Shape{h, w, 3}, DType::u8)), width(w), height(h) {
    std::memset(image.raw(), 255, image.nbytes());
  }
  // Pixel (x, y); outside the image, nothing.
  void set(int x, int y, const uint8_t rgb[3]) {
    if (x < 0 || y < 0 || x >= width || y >= height) return;
    uint8_t* p = image.data<uint8_t>() + (int64_t(y) * width + x) * 3;
    p[0] = rgb[0], p[1] = rgb[1], p[2] = rgb[2];
  }
  void rect(int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x) set(x, y, rgb);
  }
  // A line with a square brush of `thick` pixels; dash > 0 draws dash-pixel dashes.
  void line(int x0, int y0, int x1, int y1, const uint8_t rgb[3], int thick = 2, int dash = 0) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    for (int err = dx + dy, step = 0;; ++step) {
      if (dash == 0 || (step / dash) % 2 == 0) rect(x0, y0, x0 + thick - 1, y0 + thick - 1, rgb);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  void text(int x, int y, const std::string& s, const uint8_t rgb[3], int scale = 1) {
    draw_text(image, x, y, s, rgb, scale);
  }
};

}  // namespace lockstep::viz
