#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "core/errors.h"
#include "io/json.h"
#include "io/regular_file.h"

namespace mb::io {

namespace fs = std::filesystem;
using json::Kind;
using json::quote_text;

namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
constexpr size_t kMaxListed = 10;  // names listed in one error message before "and N more"

// Present under this name (symlinks followed), whatever its type: opening it refuses what is not a regular file.
bool file_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// A shard must be a plain file name inside the checkpoint directory.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
         name.find("..") == std::string::npos && name.find('\0') == std::string::npos && name != ".";
}

std::string join_listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxListed) out += cat(" and ", items.size() - kMaxListed, " more");
  return out;
}

}  // namespace

void Checkpoint::fail(const std::string& msg) const { throw CheckpointError(cat("checkpoint '", dir_, "': ", msg)); }

Checkpoint Checkpoint::open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  try {
    std::error_code ec;
    fs::file_status st = fs::status(dir, ec);
    if (ec || !fs::exists(st)) c.fail("directory does not exist");
    if (!fs::is_directory(st)) c.fail("not a directory");
    const fs::path d(dir);
    if (fs::exists(d / kIndexName, ec)) {
      c.open_index((d / kIndexName).string());
    } else if (file_exists(d / kSingleName)) {
      c.open_files({(d / kSingleName).string()});
    } else {
      std::vector<std::string> paths;
      for (const fs::directory_entry& e : fs::directory_iterator(d)) {
        std::string name = e.path().filename().string();
        if (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0 && file_exists(e.path()))
          paths.push_back(e.path().string());
      }
      if (paths.empty()) c.fail(cat("no ", kIndexName, ", ", kSingleName, " or *.safetensors files"));
      std::sort(paths.begin(), paths.end());
      c.open_files(paths);
    }
  } catch (const fs::filesystem_error& e) {
    c.fail(e.what());
  }
  return c;
}

void Checkpoint::open_files(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    files_.push_back(SafetensorsFile::open(p));
    const size_t fi = files_.size() - 1;
    for (const std::string& name : files_[fi]->keys()) {
      auto [it, fresh] = where_.emplace(name, fi);
      if (!fresh)
        fail(cat("tensor ", quote_text(name), " appears in both '", files_[it->second]->path(), "' and '", p, "'"));
      keys_.push_back(name);
    }
  }
}

void Checkpoint::open_index(const std::string& index_path) {
  auto fail_index = [&](const std::string& msg) { fail(cat("index '", index_path, "': ", msg)); };

  // Read the index, its size bounded before allocating (a FIFO or device is refused, never waited on).
  std::string text, error;
  if (!read_regular_file(index_path, kMaxHeaderBytes, &text, &error)) fail_index(error);

  json::Value root;
  try {
    root = json::parse(text);
  } catch (const json::ParseError& e) {
    fail_index(cat("invalid JSON: ", e.what(), " at byte ", e.offset));
  }
  if (!root.is(Kind::Object)) fail_index(cat("top level is ", json::kind_name(root.kind), ", expected an object"));
  const json::Value* wm = root.find("weight_map");
  if (!wm) fail_index("missing \"weight_map\"");
  if (!wm->is(Kind::Object)) fail_index(cat("weight_map is ", json::kind_name(wm->kind), ", expected an object"));
  if (wm->size() == 0) fail_index("weight_map is empty");

  // tensor name -> shard file name, checked to be plain names inside the directory.
  std::set<std::string> shard_names;
  for (size_t i = 0; i < wm->size(); ++i) {
    const json::Value& v = wm->items()[i];
    const std::string& tensor = wm->keys()[i];
    if (!v.is(Kind::String))
      fail_index(cat("weight_map entry for tensor ", quote_text(tensor), " is ", json::kind_name(v.kind), ", expected a shard file name"));
    if (!is_plain_file_name(v.str))
      fail_index(cat("weight_map places tensor ", quote_text(tensor), " in shard ", quote_text(v.str),
                     ", which is not a plain file name inside the checkpoint directory"));
    shard_names.insert(v.str);
  }

  const fs::path d(dir_);
  std::vector<std::string> missing;
  for (const std::string& s : shard_names)
    if (!file_exists(d / s)) missing.push_back(s);
  if (!missing.empty()) fail(cat("missing shard files: ", join_listed(missing)));

  std::map<std::string, size_t> shard_index;
  for (const std::string& s : shard_names) {
    files_.push_back(SafetensorsFile::open((d / s).string()));
    shard_index.emplace(s, files_.size() - 1);
  }

  std::vector<std::string> absent;
  for (size_t i = 0; i < wm->size(); ++i) {
    const std::string& tensor = wm->keys()[i];
    const std::string& shard = wm->items()[i].str;
    size_t fi = shard_index.at(shard);
    if (!files_[fi]->contains(tensor)) absent.push_back(cat(quote_text(tensor), " (shard ", shard, ")"));
    where_.emplace(tensor, fi);
  }
  if (!absent.empty()) fail(cat("tensors listed in the index are missing from their shards: ", join_listed(absent)));

  // The index is authoritative: a shard may not hold tensors it does not place there.
  for (size_t fi = 0; fi < files_.size(); ++fi) {
    for (const std::string& name : files_[fi]->keys()) {
      auto it = where_.find(name);
      if (it == where_.end())
        fail(cat("shard '", files_[fi]->path(), "' holds tensor ", quote_text(name), ", which the index does not list"));
      if (it->second != fi)
        fail(cat("shard '", files_[fi]->path(), "' holds tensor ", quote_text(name), ", which the index places in '",
                 files_[it->second]->path(), "'"));
      keys_.push_back(name);
    }
  }
}

const SafetensorsFile& Checkpoint::file_for(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail(cat("no tensor named ", quote_text(name)));
  return *files_[it->second];
}

const TensorInfo& Checkpoint::info(const std::string& name) const { return file_for(name).info(name); }

Tensor Checkpoint::tensor(const std::string& name) const { return file_for(name).tensor(name); }

void Checkpoint::check_unchanged() const {
  for (const auto& f : files_) {
    const std::string what = f->changed_on_disk();
    if (!what.empty())
      throw CheckpointError(cat(f->path(), ": ", what, " since the model was loaded; its weights are memory-mapped, "
                                "so the model cannot go on reading them: load it again"));
  }
}

}  // namespace mb::io
