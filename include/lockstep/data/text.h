// Text in the data path: Keras's text_dataset_from_directory and the host-side string
// functions behind the text preprocessing layers (lockstep/nn/text_layers.h).
//
//   auto [train, val] = data::text_dataset_from_directory("fortunes", {
//       .batch_size = 32, .seed = 42, .validation_split = 0.2, .subset = "both"});
//   train.class_names();   // sorted subfolder names
//   // elements: {Strings (batch of UTF-8 texts), labels}
//
// Behaviour follows Keras 3 (keras.utils.text_dataset_from_directory):
//  - labels "inferred": one class per subfolder (sorted by name, or `class_names` in that order),
//    files found recursively in each class folder, sorted, with extension .txt (case-insensitive);
//  - the sorted file list is shuffled with `seed` (if shuffle), then validation_split takes the
//    last int(split * N) files as validation, the rest is training (the same index and split as
//    image_dataset_from_directory: Lockstep's seeded shuffle, not numpy's, so the same seed picks
//    different files than Keras does);
//  - elements are {text, label}: the text is one string (batched: Strings), label_mode "int":
//    i32 scalar, "categorical": f32 one-hot [num_classes], "binary": f32 [1] (exactly 2
//    classes), "none": no label component. Batched by batch_size (0: unbatched), shuffled each
//    epoch with a buffer of 8 batches when shuffle, prefetched (AUTOTUNE).
//  - max_length: each text is cut to at most max_length bytes (Keras: tf.strings.substr, bytes),
//    at the last whole UTF-8 character (Keras may cut one in half).
//  - prints "Found N files belonging to C classes." and "Using K files for training."
//
// Hardening (where Keras differs, it is said):
//  - invalid UTF-8 is replaced by U+FFFD, one per maximal invalid subsequence (Python's
//    errors="replace"); a text never holds invalid UTF-8, and reading never crashes;
//  - a file over max_file_bytes (default 10 MiB) is an error naming it and the cap, when the
//    folder is indexed (and again if it grew before it is read);
//  - an empty class folder is an error naming it (Keras lists the class with no files);
//  - symbolic links, FIFOs and devices: the image loader's rules (links to folders followed only
//    with follow_links, a loop listed once; a FIFO or device named .txt is an error naming it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/image_folder.h"

namespace lockstep::data {

/// The options of Keras's text_dataset_from_directory, in Keras's argument order (designated
/// initializers must keep it): labels, label_mode, class_names, batch_size, max_length, shuffle,
/// seed, validation_split, subset, follow_links, verbose, then Lockstep's own.
struct TextFolderOptions {
  std::string labels = "inferred";       ///< "inferred" or "none"
  std::string label_mode = "int";        ///< "int" | "categorical" | "binary" | "none"
  std::vector<std::string> class_names;  ///< empty: sorted subfolder names
  int batch_size = 32;                   ///< 0: unbatched
  int64_t max_length = -1;               ///< bytes kept of each text; -1: all
  bool shuffle = true;                   ///< shuffle the files (seeded) and each epoch
  std::optional<uint64_t> seed;          ///< required with validation_split and shuffle
  double validation_split = 0.0;         ///< in (0, 1) together with subset
  std::string subset;                    ///< "" | "training" | "validation" | "both"
  bool follow_links = false;             ///< follow symbolic links to folders
  bool verbose = true;                   ///< the "Found ..." / "Using ..." lines
  /// A file larger than this is an error naming it (the text is held in memory whole).
  int64_t max_file_bytes = int64_t(10) << 20;
  std::vector<std::string> allowed_extensions = {".txt"};  ///< which files count as texts
  int num_parallel_calls = AUTOTUNE;                       ///< file reading parallelism
};

/// What text_dataset_from_directory returns: a Dataset with its class names, files and labels
/// (and, for subset "both", the validation set: `auto [train, val] = ...`).
using TextDataset = ImageDataset;

/// keras.utils.text_dataset_from_directory: batches {Strings, labels} from a folder of class
/// subfolders of .txt files (behaviour: above).
TextDataset text_dataset_from_directory(const std::string& directory,
                                        TextFolderOptions options = {});

/// Reads one text file as text_dataset_from_directory does: at most max_file_bytes (else an
/// error naming the file), invalid UTF-8 replaced, cut to max_length bytes (-1: all).
std::string read_text_file(const std::string& path, int64_t max_file_bytes = int64_t(10) << 20,
                           int64_t max_length = -1);

/// For Dataset::map: keeps only component 0 (the texts of {texts, labels}), e.g. to adapt() a
/// TextVectorization on text_dataset_from_directory's batches (Keras: `ds.map(lambda x, y: x)`).
Element first_component(Element e);

// ---------------------------------------------------------------------------------------------
// UTF-8 and the string steps of TextVectorization (Keras's tf.strings semantics)

/// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);
/// `s` with each maximal invalid subsequence replaced by U+FFFD (as Python's
/// bytes.decode("utf-8", errors="replace") and TensorFlow's unicode ops with errors="replace").
std::string sanitize_utf8(std::string_view s);
/// Cuts valid UTF-8 to at most max_bytes bytes, at a character boundary.
std::string truncate_utf8(std::string s, size_t max_bytes);

/// tf.strings.lower without an encoding, as Keras calls it: ASCII A-Z only (É stays É).
std::string lower_ascii(std::string s);
/// Removes Keras's punctuation set: the 32 ASCII characters of Python's string.punctuation
/// (every printable ASCII character that is not a letter, a digit or a space; Keras's regex in
/// TextVectorization). Other characters, non-ASCII punctuation included, stay.
std::string strip_punctuation(std::string_view s);
/// tf.strings.split(s): tokens separated by runs of ASCII whitespace (" \t\n\v\f\r"), none
/// empty.
std::vector<std::string> split_whitespace(std::string_view s);
/// tf.strings.unicode_split(s, "UTF-8"): one token per character (invalid bytes: U+FFFD).
std::vector<std::string> split_characters(std::string_view s);
/// tf.strings.ngrams(tokens, widths, separator): for each width in order, every run of that many
/// consecutive tokens joined by `separator` (a width longer than the tokens adds nothing).
std::vector<std::string> ngrams(const std::vector<std::string>& tokens,
                                const std::vector<int>& widths, const std::string& separator = " ");

/// FarmHash's Fingerprint64 (farmhash::Fingerprint64, farmhashna's Hash64): what
/// tf.strings.to_hash_bucket_fast and so Keras's Hashing layer (without salt) use.
uint64_t farmhash_fingerprint64(std::string_view s);

/// Counts tokens over documents for adapt(): term counts, document counts and the number of
/// documents, then Keras's vocabulary order.
class TokenCounter {
 public:
  /// Adds one document's tokens (each counted; once per document for the document counts).
  void add_document(const std::vector<std::string>& tokens);
  /// Keras's order (IndexLookup.finalize_state): by count, descending; ties by the token's bytes,
  /// descending (numpy.lexsort((tokens, counts))[::-1]). `exclude` (the mask and OOV tokens) are
  /// left out; at most `max_tokens` (-1: all).
  std::vector<std::string> vocabulary(int64_t max_tokens = -1,
                                      const std::vector<std::string>& exclude = {}) const;
  /// How many documents hold `token`.
  int64_t document_count(const std::string& token) const;
  int64_t num_documents() const { return num_documents_; }  ///< documents added
  void clear();                                             ///< forgets everything

 private:
  struct Counts {
    int64_t terms = 0, documents = 0;
  };
  std::unordered_map<std::string, Counts> counts_;
  int64_t num_documents_ = 0;
};

}  // namespace lockstep::data
