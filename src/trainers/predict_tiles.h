// Internal to train: predict in row tiles. An inference program whose every output row depends
// only on the same row of the inputs (every Keras layer in inference mode: convolutions,
// pooling, BatchNormalization with its moving statistics, Dense, ...) gives the same
// predictions whatever the batch is cut into. Program then runs a large predict batch as tiles
// of a few dozen rows, so each layer's output stays in cache for the next layer instead of going
// to memory and back: the reference CNN's 32->64 conv writes 147 KB per image in float32, 147 MB
// for a batch of 1,000, which its max pooling then reads again.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep {

// Whether row r of every output depends only on row r of the inputs (dim 0 of every input is
// the batch, `batch` rows). Conservative: an op it does not know, or one that reduces, sorts,
// normalises or concatenates along dim 0, or a constant with `batch` rows combined with the
// data, makes it false; *why then names the node. When true, *widest_row_bytes (if given) is
// the largest per-row size of any value computed from the inputs (one sample's widest
// activation).
bool rows_independent(const Graph& g, const std::vector<Value>& inputs,
                      const std::vector<Value>& outputs, int64_t batch, std::string* why = nullptr,
                      int64_t* widest_row_bytes = nullptr);

// Rows per tile for a predict batch of `batch` rows whose widest activation takes `row_bytes`
// per row: about kTileBytes of that activation per tile, at least 8 rows, a multiple of 8;
// 0 (no tiling) when the batch is less than two tiles, or less than kMinTilesWide tiles when a
// tile has fewer than 16 rows. LOCKSTEP_PREDICT_TILE=N forces N rows
// (0: never tile).
inline constexpr int64_t kTileBytes = int64_t(4) << 20;
// Tiles a batch needs before it is tiled when a row is wider than kTileBytes / 16 (see
// predict_tile_rows): MobileNetV2 at 96 px (884 KB per row in float32, 442 KB in bfloat16) ran
// its batch of 32 as four 8-row tiles, about 4x the per-step kernel launches for no cache gain
// (bfloat16 EfficientNetB0 / MobileNetV2 inference ~30% slower than untiled).
inline constexpr int64_t kMinTilesWide = 8;
int64_t predict_tile_rows(int64_t batch, int64_t row_bytes);

// Threads that run a predict batch of `batch` rows as that many tiles at once, each tile
// through its own single-threaded program (Program::run_thread_tiles), or 1. Each thread then
// keeps its tile's activations in its own caches from layer to layer. With every kernel split
// over the threads instead, each layer hands half of its output to the other thread: on this
// project's 2-core Zen 4 VM, whose two vCPUs the host sometimes places on different CCDs (no
// shared L3), that exchange ran at ~95 GB/s against ~260 GB/s when they share one, and
// EfficientNetB0's 96x96 predict at 690-700 img/s against 960-1,010 (docs/benchmarks.md). The
// OpenMP thread count when it is more than 1, nested regions are inactive (a kernel's own
// OpenMP loops then run on its tile's thread) and it divides the batch into tiles of at least
// kMinThreadTileRows, and the cache tiles above do not apply (LOCKSTEP_PREDICT_TILE set, to a
// size or to 0, turns thread tiles off too); LOCKSTEP_PREDICT_THREAD_TILES=0 turns them off.
inline constexpr int64_t kMinThreadTileRows = 4;
int predict_thread_tiles(int64_t batch);

}  // namespace lockstep
