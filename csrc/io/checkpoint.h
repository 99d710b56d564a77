// A checkpoint directory: one or more safetensors files presented as a single name -> tensor map.
//
// Resolution, first match wins:
//   1. model.safetensors.index.json: its "weight_map" (tensor name -> shard file name) is
//      authoritative. Every shard must exist (all missing ones are named in one error), every listed
//      tensor must be in its named shard, and a shard must not hold tensors the index does not list.
//      Shard names are plain file names: '/', '\', ".." and empty names are rejected.
//   2. model.safetensors alone.
//   3. every *.safetensors file in the directory (sorted by name); a tensor name present in two files
//      is an error naming both.
// A directory with none of these is a CheckpointError.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/safetensors.h"

namespace mb::io {

class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Tensor names: files in files() order, within a file by data offset.
  const std::vector<std::string>& keys() const { return keys_; }
  size_t size() const { return keys_.size(); }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  Tensor packed_bytes(const std::string& name) const { return file_for(name).packed_bytes(name); }
  void release(const std::string& name) const { file_for(name).release(name); }
  // The file holding `name`.
  const SafetensorsFile& file_for(const std::string& name) const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  // CheckpointError naming the first file changed on disk under its mapping (SafetensorsFile::changed_on_disk).
  void check_unchanged() const;

 private:
  [[noreturn]] void fail(const std::string& msg) const;
  void open_index(const std::string& index_path);
  void open_files(const std::vector<std::string>& paths);

  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, size_t> where_;  // name -> index into files_
};

}  // namespace mb::io
