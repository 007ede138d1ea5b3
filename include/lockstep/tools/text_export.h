// Exports labelled text to a folder of class subfolders of .txt files, the layout
// text_dataset_from_directory reads: Debian's `fortunes` package (one quote per file, the
// category file as the class), the real text corpus of the text classification job.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::tools {

/// Where Debian's fortunes package puts its category files.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

/// The categories exported by default: the six largest with a topic of their own (computers,
/// definitions, people, politics, science, songs-poems: 620-1250 quotes each, 5,553 in all).
/// Left out: the grab-bags without a topic (cookie, fortunes, miscellaneous, platitudes, zippy,
/// knghtbrd, wisdom), the small ones, and anything of fortunes-off (the offensive set, a
/// separate package the set-up does not install).
std::vector<std::string> default_fortune_categories();

/// What export_fortunes writes.
struct ExportFortunesOptions {
  std::vector<std::string> categories = default_fortune_categories();  ///< the classes
  int64_t limit_per_class = -1;                                        ///< < 0: every quote
  int64_t min_chars = 1;  ///< quotes shorter than this (after trimming) are skipped
};

/// What export_fortunes wrote.
struct ExportFortunesResult {
  int64_t files = 0;                    ///< files written in all
  std::vector<std::string> categories;  ///< in the order written
  std::vector<int64_t> per_class;       ///< quotes written per category
};

/// Splits one fortune file's text into its quotes (entries separated by lines holding only "%"),
/// trimmed of surrounding blank lines; empty entries are dropped.
std::vector<std::string> split_fortunes(const std::string& text);

/// Writes `out_dir/<category>/<index>.txt` (index zero-padded, in file order) for each
/// category of `fortunes_dir` (Debian: /usr/share/games/fortunes). Throws naming the problem: a
/// missing category file (with the package to install), a category name with '/' or "..",
/// an unwritable out_dir.
ExportFortunesResult export_fortunes(const std::string& fortunes_dir, const std::string& out_dir,
                                     const ExportFortunesOptions& options = {});

}  // namespace lockstep::tools
