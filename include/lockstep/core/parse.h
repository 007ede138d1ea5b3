// Checked numbers from command lines and environment variables: one place that turns text into
// a number or says exactly why it cannot, naming the flag or variable. Nothing wraps, nothing
// is silently truncated: "4294967297" for an int flag, "1e12" for a batch size, "64x", "",
// " 8", "nan" and "inf" are all errors.
//
//   int64_t batch = lockstep::parse_int("--batch-size", argv[i], 1, 1 << 24);
//   double split = lockstep::parse_double("--validation-split", text, 0.0, 1.0);
//
// Errors are lockstep::Error, e.g.
//   --batch-size expects an integer in 1..16777216, got '4294967297' (out of range)
//   --epochs expects an integer in 0..1000000, got 'ten' (not an integer)
#pragma once
#include <cstdint>
#include <string_view>

namespace lockstep {

/// A whole decimal integer (optional leading '-' or '+', digits, nothing else) in [min, max].
/// `what` names the flag or variable in the error.
int64_t parse_int(std::string_view what, std::string_view text, int64_t min, int64_t max);

/// A whole finite decimal number ("0.2", "-3", "1e-3"; no "nan", "inf", hex or trailing junk)
/// in [min, max].
double parse_double(std::string_view what, std::string_view text, double min, double max);

/// The largest thread count a --threads flag accepts: 4 x std::thread::hardware_concurrency()
/// (at least 16). More threads than that only oversubscribe the machine (10000 threads made
/// training ~150x slower).
int max_thread_count();

/// parse_int(what, text, 0, max_thread_count()) (0 conventionally means "the default").
int parse_thread_count(std::string_view what, std::string_view text);

}  // namespace lockstep
