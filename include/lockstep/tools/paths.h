// What the command-line tools check about the paths and names they are given: an output that is
// one of the inputs (writing it would destroy the input), and names from files (class names,
// file names) made safe to print on a terminal.
#pragma once
#include <string>
#include <vector>

namespace lockstep::tools {

/// Whether `a` and `b` name the same existing file: the same device and inode (so a hard link,
/// a symlink, "./x" and "x" all count). False when either does not exist.
bool same_file(const std::string& a, const std::string& b);

/// Throws lockstep::Error, naming `command`, when `output` is the same file as one of `inputs`
/// (same_file): `lockstep export-onnx x.keras x.keras` would otherwise destroy x.keras. An output
/// that does not exist yet is fine.
void check_output_is_not_input(const std::string& command, const std::string& output,
                               const std::vector<std::string>& inputs);

/// `text` with terminal control characters escaped, so that a class or file name cannot move
/// the cursor, recolour or retitle the terminal: C0 controls and DEL as C escapes (backslash t,
/// n, r, e, or x and two hex digits), C1 controls (UTF-8 U+0080..U+009F) as backslash u and four
/// hex digits, a backslash as two. Printable UTF-8 passes unchanged.
std::string printable(const std::string& text);

}  // namespace lockstep::tools
