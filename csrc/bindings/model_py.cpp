// markbase._core.gemma4.Model / Session: a loaded checkpoint and its decoding sessions (driven by
// python/markbase/api.py). Token ids cross as int32 arrays (no copy when already int32 and contiguous);
// logits come back as numpy arrays only when asked for.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "backend/backend.h"
#include "bindings/registry.h"
#include "bindings/tensor_py.h"
#include "core/alloc_count.h"
#include "core/errors.h"
#include "models/gemma4/model.h"
#include "runtime/sampler.h"
#include "runtime/session.h"

namespace mb::py_bind {
namespace {

using gemma4::Gemma4Model;
using runtime::Sampler;
using runtime::Session;
using Ids = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

const int32_t* ids_of(const Ids& ids, const char* what) {
  if (ids.ndim() != 1) throw InputError(cat(what, " must be one sequence of token ids [T]"));
  return ids.data();
}

// A numpy copy of logits the session keeps (its [1, V] buffer is rewritten by the next forward).
py::array owned_copy(const Tensor& t) { return tensor_to_numpy(t.clone()); }

void bind_model(py::module_& m) {
  py::class_<runtime::NonFiniteReport>(m, "NonFiniteReport", "Where a forward first produced NaN or Inf.")
      .def_readonly("found", &runtime::NonFiniteReport::found)
      .def_property_readonly("layer", [](const runtime::NonFiniteReport& r) -> py::object {
        if (r.layer < 0) return py::none();
        return py::int_(r.layer);
      })
      .def_readonly("intermediate", &runtime::NonFiniteReport::intermediate)
      .def_readonly("op", &runtime::NonFiniteReport::op)
      .def_readonly("backend", &runtime::NonFiniteReport::backend)
      .def_readonly("inputs", &runtime::NonFiniteReport::inputs)
      .def_readonly("output", &runtime::NonFiniteReport::output)
      .def_property_readonly("where", &runtime::NonFiniteReport::where)
      .def("__bool__", [](const runtime::NonFiniteReport& r) { return r.found; })
      .def("__str__", &runtime::NonFiniteReport::describe)
      .def("__repr__", [](const runtime::NonFiniteReport& r) { return cat("NonFiniteReport(", r.where(), ")"); });

  py::class_<Gemma4Model, std::shared_ptr<Gemma4Model>>(m, "Model", "A loaded Gemma 4 checkpoint.")
      .def_static("load", [](const std::string& dir, const std::string& device, int64_t max_context, int64_t prefill_chunk,
                             int quantize_bits, int group_size, bool reduced_precision, bool int8_activations,
                             int embedding_bits) {
        gemma4::LoadOptions opt;
        opt.exec = make_exec(device, false);
        opt.exec.int16_activations = reduced_precision;
        opt.exec.int8_activations = reduced_precision && int8_activations;
        opt.exec.bf16_products = reduced_precision;
        opt.max_context = max_context;
        opt.prefill_chunk = prefill_chunk;
        opt.quantize.bits = quantize_bits;
        opt.quantize.group_size = group_size;
        if (embedding_bits != 4 && embedding_bits != 8)
          throw InputError(cat("Model.load: embedding_bits must be 4 or 8, got ", embedding_bits));
        opt.quantize.table_bits = embedding_bits;
        py::gil_scoped_release nogil;
        return Gemma4Model::load(dir, opt);
      }, py::arg("dir"), py::arg("device") = "cpu", py::arg("max_context") = 0, py::arg("prefill_chunk") = 512,
         py::arg("quantize_bits") = 0, py::arg("group_size") = 64, py::arg("reduced_precision") = false,
         py::arg("int8_activations") = false, py::arg("embedding_bits") = 8,
         "Parses DIR/config.json and binds every tensor of the weight table from the mapped checkpoint; "
         "quantize_bits 4 / 8 quantizes the decoder's matrices at load (MLX affine, groups of group_size); "
         "reduced_precision (precision=\"auto\") lets quantized GEMVs / GEMMs round x to 16 bits per group "
         "(ops/quant.h) and the CPU prefill GEMM with bf16 weights multiply bf16 products (ops/exec.h); "
         "int8_activations (precision=\"fast\") further lets the quantized decode GEMV round x to 8 bits per group; "
         "embedding_bits (8 or 4) is what quantize_bits does to the tied embedding / LM head.")
      .def_property_readonly("reduced_precision", [](const Gemma4Model& mdl) { return mdl.exec().int16_activations; })
      .def_property_readonly("int8_activations", [](const Gemma4Model& mdl) { return mdl.exec().int8_activations; })
      .def_property_readonly("decode_weight_bytes", &Gemma4Model::decode_weight_bytes,
                             "Bytes of decoder weights one decode step reads, as held (quantized or not).")
      .def("session_arena_bytes", [](const Gemma4Model& mdl, int64_t max_context) {
        if (max_context < 1) throw InputError(cat("session_arena_bytes: max_context must be >= 1, got ", max_context));
        py::gil_scoped_release nogil;
        return mdl.text().session_arena_bytes(max_context);
      }, py::arg("max_context"), "Bytes of activation arena a session of this max_context allocates (measured).")
      .def("batch_arena_bytes", [](const Gemma4Model& mdl, int64_t rows) {
        if (rows < 1) throw InputError(cat("batch_arena_bytes: rows must be >= 1, got ", rows));
        py::gil_scoped_release nogil;
        return mdl.text().batch_arena_bytes(rows);
      }, py::arg("rows"), "Bytes of arena a batched decode step of this many sequences runs through (measured).")
      .def_property_readonly("config", &Gemma4Model::config, py::return_value_policy::reference_internal)
      .def_property_readonly("dir", &Gemma4Model::dir)
      .def_property_readonly("max_context", &Gemma4Model::max_context)
      .def_property_readonly("prefill_chunk", [](const Gemma4Model& mdl) { return mdl.text().settings().max_chunk; })
      .def_property_readonly("device", [](const Gemma4Model& mdl) { return std::string(mdl.exec().backend->name()); })
      .def_property_readonly("check_finite", &Gemma4Model::check_finite)
      .def("trace_nonfinite", [](const Gemma4Model& mdl, const Ids& ids, const py::object& x, const std::optional<Ids>& blocks) {
        const int32_t* p = ids_of(ids, "input_ids");
        Tensor xt = x.is_none() ? Tensor() : as_tensor(x, "trace_nonfinite", "embeddings");
        const int32_t* b = blocks ? ids_of(*blocks, "block_ids") : nullptr;
        runtime::NonFiniteReport r;
        {
          py::gil_scoped_release nogil;
          r = runtime::trace_nonfinite(mdl, p, ids.size(), xt, b);
        }
        return r;
      }, py::arg("ids"), py::arg("embeddings") = py::none(), py::arg("block_ids") = py::none(),
         "Runs a forward from an empty cache checking every op; the report of the first NaN / Inf.")
      .def_property_readonly("has_vision", &Gemma4Model::has_vision)
      .def("encode_image", [](const Gemma4Model& mdl, const py::object& pixels, const py::object& positions) {
        Tensor px = as_tensor(pixels, "encode_image", "pixel_values");
        Tensor pos = as_tensor(positions, "encode_image", "positions");
        gemma4::VisionOutput out;
        {
          py::gil_scoped_release nogil;
          out = mdl.encode_image(px, pos);
        }
        return py::make_tuple(tensor_to_numpy(out.pooled), tensor_to_numpy(out.soft));
      }, py::arg("pixel_values"), py::arg("positions"),
         "One image's patches (f32 [N, 3·patch²] in [0, 1], i32 [N, 2] positions) → (features before the "
         "projection [n, D], soft tokens [n, hidden]).")
      .def_property_readonly("has_audio", &Gemma4Model::has_audio)
      .def("encode_audio", [](const Gemma4Model& mdl, const py::object& features, int64_t valid_frames) {
        Tensor ft = as_tensor(features, "encode_audio", "features");
        gemma4::AudioOutput out;
        {
          py::gil_scoped_release nogil;
          out = mdl.encode_audio(ft, valid_frames);
        }
        return py::make_tuple(out.hidden.defined() ? py::object(tensor_to_numpy(out.hidden)) : py::object(py::none()),
                              tensor_to_numpy(out.soft));
      }, py::arg("features"), py::arg("valid_frames"),
         "One clip as its processor prepared it: log-mel features f32 [F, 128] whose first valid_frames are real "
         "(audio tower), or waveform frames f32 [n, 640] (12B) → (tower output [n, output_proj_dims] or None, "
         "soft tokens [n, hidden]).")
      .def("embed", [](const Gemma4Model& mdl, const Ids& ids) {
        const int64_t T = ids.size();
        Tensor out = Tensor::empty(DType::F32, {T, mdl.config().text_config.hidden_size});
        const int32_t* p = ids_of(ids, "ids");
        {
          py::gil_scoped_release nogil;
          mdl.check_files_unchanged();
          mdl.text().embed(p, T, out);
        }
        return tensor_to_numpy(out);
      }, py::arg("ids"), "Token embeddings f32 [T, H] (scaled; placeholder ids embedded as pad).");

  py::class_<Session>(m, "Session", "A KV-cached decoding session of a Model.")
      .def(py::init<std::shared_ptr<const Gemma4Model>, int64_t>(), py::arg("model"), py::arg("max_context"))
      .def_property_readonly("position", &Session::position)
      .def_property_readonly("max_context", &Session::max_context)
      .def("cache_bytes", &Session::cache_bytes)
      .def("arena_bytes", &Session::arena_bytes)
      .def("reset", &Session::reset)
      .def("truncate", &Session::truncate, py::arg("n"))
      .def("prefill", [](Session& s, const Ids& ids, bool all_logits) {
        const int32_t* p = ids_of(ids, "input_ids");
        Tensor out;
        {
          py::gil_scoped_release nogil;
          out = s.prefill(p, ids.size(), all_logits);
        }
        return all_logits ? tensor_to_numpy(out) : owned_copy(out);
      }, py::arg("ids"), py::arg("all_logits") = false)
      .def("prefill_embeds", [](Session& s, const py::object& x, const Ids& ids, const std::optional<Ids>& blocks,
                                bool all_logits) {
        Tensor xt = as_tensor(x, "prefill_embeds", "embeddings");
        const int32_t* p = ids_of(ids, "input_ids");
        const int32_t* b = nullptr;
        if (blocks) {
          if (blocks->size() != ids.size()) throw InputError("prefill_embeds: block_ids must have one entry per token");
          b = ids_of(*blocks, "block_ids");
        }
        Tensor out;
        {
          py::gil_scoped_release nogil;
          out = s.prefill_embeds(xt, p, b, ids.size(), all_logits);
        }
        return all_logits ? tensor_to_numpy(out) : owned_copy(out);
      }, py::arg("embeddings"), py::arg("ids"), py::arg("block_ids") = py::none(), py::arg("all_logits") = false)
      .def("decode", [](Session& s, int32_t id) {
        Tensor out;
        {
          py::gil_scoped_release nogil;
          out = s.decode(id);
        }
        return owned_copy(out);
      }, py::arg("token_id"))
      .def("sample", [](Session& s, Sampler& sampler) {
        py::gil_scoped_release nogil;
        return s.sample(sampler);
      }, py::arg("sampler"), "The next token drawn from the last position's logits.")
      .def("step", [](Session& s, int32_t id, Sampler& sampler) {
        py::gil_scoped_release nogil;
        return s.step(id, sampler);
      }, py::arg("token_id"), py::arg("sampler"), "Feeds token_id and samples the next one, all in C++.");

  m.def("decode_batch", [](const std::vector<Session*>& sessions, const Ids& ids) {
        const int32_t* p = ids_of(ids, "ids");
        if (size_t(ids.size()) != sessions.size())
          throw InputError(cat("decode_batch: ", sessions.size(), " sessions but ", ids.size(), " token ids"));
        {
          py::gil_scoped_release nogil;
          Session::decode_batch(sessions, p);
        }
        py::list out;
        for (Session* s : sessions) out.append(owned_copy(s->last_logits()));
        return out;
      }, py::arg("sessions"), py::arg("ids"),
      "One decode step of several sessions at once (weights read once for all): ids[b] is session b's next "
      "token; returns each session's logits [1, V].");
  m.def("step_batch", [](const std::vector<Session*>& sessions, const Ids& ids, const std::vector<Sampler*>& samplers) {
        const int32_t* p = ids_of(ids, "ids");
        if (size_t(ids.size()) != sessions.size())
          throw InputError(cat("step_batch: ", sessions.size(), " sessions but ", ids.size(), " token ids"));
        std::vector<int32_t> next(sessions.size());
        {
          py::gil_scoped_release nogil;
          Session::step_batch(sessions, p, samplers, next.data());
        }
        return next;
      }, py::arg("sessions"), py::arg("ids"), py::arg("samplers"),
      "decode_batch then each session's sampler: the next token of every session, all in C++.");

  m.def("_heap_allocations_over_steps", [](Session& s, int32_t token, Sampler& sampler, int64_t steps) {
        // Diagnostics for the tests: heap allocations made by markbase's code over `steps` generation steps
        // run back to back in C++ (no Python or binding work in between).
        py::gil_scoped_release nogil;
        const uint64_t before = heap_allocations();
        for (int64_t i = 0; i < steps; ++i) token = s.step(token, sampler);
        return heap_allocations() - before;
      }, py::arg("session"), py::arg("token_id"), py::arg("sampler"), py::arg("steps"));
}

Registrar reg_model("gemma4", bind_model, 60);

}  // namespace
}  // namespace mb::py_bind
