// Support code for gk/op.h: parameter getters, ParamArray conversions and the op registry.
#include "gk/op.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>

#include "gk/errors.h"

namespace gk {
namespace {

const char* type_name(const ParamValue& v) {
    switch (v.index()) {
        case 0: return "bool";
        case 1: return "int";
        case 2: return "float";
        case 3: return "string";
        default: return "array";
    }
}

std::string where(const OpParams& p, const std::string& key) {
    std::string text = "op '" + (p.kind.empty() ? std::string("?") : p.kind) + "'";
    if (!p.stage.empty()) text += " (stage '" + p.stage + "')";
    return text + ": parameter '" + key + "'";
}

const ParamValue& lookup(const OpParams& p, const std::string& key) {
    auto it = p.values.find(key);
    if (it == p.values.end()) throw std::invalid_argument(where(p, key) + " missing");
    return it->second;
}

[[noreturn]] void wrong_type(const OpParams& p, const std::string& key, const ParamValue& v,
                             const char* expected) {
    throw std::invalid_argument(where(p, key) + " has type " + type_name(v) + ", expected " +
                                expected);
}

// Registry: a function-local static, so registration from other translation units' static
// initialisers never runs before it exists.
struct Registry {
    std::mutex mutex;
    std::map<std::string, OpFactory> factories;
};

Registry& registry() {
    static Registry r;
    return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// OpParams
// ---------------------------------------------------------------------------------------------

bool OpParams::get_bool(const std::string& key) const {
    const ParamValue& v = lookup(*this, key);
    if (const bool* b = std::get_if<bool>(&v)) return *b;
    if (const int64_t* i = std::get_if<int64_t>(&v)) {
        if (*i == 0 || *i == 1) return *i == 1;
    }
    wrong_type(*this, key, v, "bool");
}

int64_t OpParams::get_int(const std::string& key) const {
    const ParamValue& v = lookup(*this, key);
    if (const int64_t* i = std::get_if<int64_t>(&v)) return *i;
    wrong_type(*this, key, v, "int");
}

double OpParams::get_float(const std::string& key) const {
    const ParamValue& v = lookup(*this, key);
    if (const double* d = std::get_if<double>(&v)) return *d;
    if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    wrong_type(*this, key, v, "float");
}

const std::string& OpParams::get_str(const std::string& key) const {
    const ParamValue& v = lookup(*this, key);
    if (const std::string* s = std::get_if<std::string>(&v)) return *s;
    wrong_type(*this, key, v, "string");
}

const ParamArray& OpParams::get_array(const std::string& key) const {
    const ParamValue& v = lookup(*this, key);
    if (const ParamArray* a = std::get_if<ParamArray>(&v)) return *a;
    wrong_type(*this, key, v, "array");
}

int64_t OpParams::get_int(const std::string& key, int64_t fallback) const {
    return has(key) ? get_int(key) : fallback;
}

double OpParams::get_float(const std::string& key, double fallback) const {
    return has(key) ? get_float(key) : fallback;
}

bool OpParams::get_bool(const std::string& key, bool fallback) const {
    return has(key) ? get_bool(key) : fallback;
}

std::string OpParams::get_str(const std::string& key, const std::string& fallback) const {
    return has(key) ? get_str(key) : fallback;
}

// ---------------------------------------------------------------------------------------------
// ParamArray
// ---------------------------------------------------------------------------------------------

std::vector<float> ParamArray::real_f32() const {
    if (is_complex)
        throw UnsupportedError("(array parameter)", "cuda",
                               "a complex array was given where the op needs a real one");
    std::vector<float> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<float>(values[i].real());
    return out;
}

std::vector<float> ParamArray::interleaved_c64() const {
    std::vector<float> out(2 * values.size());
    for (size_t i = 0; i < values.size(); ++i) {
        out[2 * i] = static_cast<float>(values[i].real());
        out[2 * i + 1] = static_cast<float>(values[i].imag());
    }
    return out;
}

std::vector<double> ParamArray::real_f64() const {
    if (is_complex)
        throw UnsupportedError("(array parameter)", "cuda",
                               "a complex array was given where the op needs a real one");
    std::vector<double> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = values[i].real();
    return out;
}

// ---------------------------------------------------------------------------------------------
// Registry
// ---------------------------------------------------------------------------------------------

bool register_op(const std::string& kind, OpFactory factory) {
    if (kind.empty()) throw std::logic_error("register_op: empty op kind");
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.factories.emplace(kind, std::move(factory)).second)
        throw std::logic_error("op kind '" + kind + "' registered twice");
    return true;
}

std::vector<std::string> registered_ops() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::vector<std::string> out;
    out.reserve(r.factories.size());
    for (const auto& f : r.factories) out.push_back(f.first);
    return out;  // std::map: sorted
}

std::unique_ptr<Op> make_op(const std::string& kind, const OpArgs& args) {
    OpFactory factory;
    {
        Registry& r = registry();
        std::lock_guard<std::mutex> lock(r.mutex);
        auto it = r.factories.find(kind);
        if (it != r.factories.end()) factory = it->second;
    }
    if (!factory) {
        std::string known;
        for (const auto& k : registered_ops()) known += (known.empty() ? "" : ", ") + k;
        throw UnsupportedError(args.name, "cuda",
                               "no CUDA op of kind '" + kind + "' in this build (implemented: " +
                                   (known.empty() ? std::string("none") : known) + ")");
    }
    std::unique_ptr<Op> op = factory(args);
    if (!op) throw std::logic_error("op factory for '" + kind + "' returned nothing");
    op->block_items_ = args.in.items;
    return op;
}

void Op::enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) {
    if (begin != 0 || end != units())
        throw std::logic_error(std::string("op '") + kind() + "' has " + std::to_string(units()) +
                               " unit(s) and cannot run units [" + std::to_string(begin) + ", " +
                               std::to_string(end) + ") alone");
    enqueue(stream, in, out, block_items_, false);
}

}  // namespace gk
