// markbase._core.Sampler
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "bindings/registry.h"
#include "core/errors.h"
#include "runtime/sampler.h"

namespace mb::py_bind {
namespace {

namespace py = pybind11;
using runtime::Sampler;
using runtime::SamplerParams;

void bind_sampler(py::module_& m) {
  py::class_<Sampler>(m, "Sampler", "Seeded token sampler (penalties, temperature, top-k, top-p, min-p).")
      .def(py::init([](float temperature, int64_t top_k, float top_p, float min_p, float repetition_penalty,
                       float presence_penalty, float frequency_penalty, uint64_t seed) {
             SamplerParams p;
             p.temperature = temperature;
             p.top_k = top_k;
             p.top_p = top_p;
             p.min_p = min_p;
             p.repetition_penalty = repetition_penalty;
             p.presence_penalty = presence_penalty;
             p.frequency_penalty = frequency_penalty;
             return new Sampler(p, seed);
           }),
           py::kw_only(), py::arg("temperature") = 1.0f, py::arg("top_k") = 0, py::arg("top_p") = 1.0f,
           py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f, py::arg("presence_penalty") = 0.0f,
           py::arg("frequency_penalty") = 0.0f, py::arg("seed") = 0)
      .def("observe_prompt", [](Sampler& s, const py::array_t<int32_t, py::array::c_style | py::array::forcecast>& t) {
        s.observe_prompt(t.data(), t.size());
      }, py::arg("tokens"))
      .def("sample", [](Sampler& s, const py::array_t<float, py::array::c_style | py::array::forcecast>& logits) {
        if (logits.ndim() != 1) throw InputError("sampler: logits must be 1-D [vocab]");
        return s.sample(logits.data(), logits.size());
      }, py::arg("logits"))
      .def("reset", &Sampler::reset, py::arg("seed"));
}

Registrar reg_sampler("", bind_sampler, 50);

}  // namespace
}  // namespace mb::py_bind
