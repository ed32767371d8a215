#include "core/definition_loader.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "core/canonical.hpp"
#include "core/detail/yaml_reader.hpp"
#include "core/step_graph.hpp"
#include "core/text_scan.hpp"

namespace sagaflow {

std::string Diagnostic::ToString() const {
    std::ostringstream out;
    out << file;
    if (line > 0) {
        out << ':' << line << ':' << column;
    }
    out << ": error: ";
    if (!path.empty()) {
        out << path << ": ";
    }
    out << message;
    return out.str();
}

DefinitionError::DefinitionError(std::vector<Diagnostic> diagnostics)
    : std::runtime_error("invalid saga definition:\n" + detail::JoinDiagnostics(diagnostics)),
      diagnostics_(std::move(diagnostics)) {}

namespace {

using std::chrono::milliseconds;

constexpr int kMaxSchemaDepth = 8;
// Fields in the whole input schema, each use of a YAML alias counted again: 10 aliased fields per
// level over 8 levels would otherwise be 10^8 fields.
constexpr int kMaxSchemaFields = 1000;
constexpr int kMaxTemplateDepth = 16;
constexpr int kMaxTemplateNodes = 4096;  // per template; aliases cannot blow it up
// In all templates and defaults of a file together, each use of an alias counted again: a step
// list of aliases of one large step would otherwise be read once per alias.
constexpr int kMaxDocumentNodes = 65'536;
constexpr std::size_t kMaxSteps = 256;
// Names appear in URLs, topic names and SQL rows: keep them to a safe, readable alphabet.
constexpr bool (*kValidName)(std::string_view) = &text::IsKebabName;

using detail::FormatDuration;
using detail::Join;
using detail::KindOfNode;
using detail::Suggest;
using Entry = detail::YamlEntry;
using Fields = detail::YamlFields;

const detail::DocumentKind& DefinitionKind() {
    static const detail::DocumentKind kKind{"a saga definition", kMaxDefinitionBytes, "put one saga in each file"};
    return kKind;
}

class Loader : public detail::YamlReader {
  public:
    explicit Loader(std::string file) : YamlReader(std::move(file), DefinitionKind()) {}

    LoadResult Run(std::string_view text);

  private:
    // --- sections ---
    void ReadRetry(const Fields& fields, std::string_view key, const std::string& path, RetryPolicy& policy);
    std::vector<FieldSchema> ReadSchema(const Entry& entry, const std::string& path, int depth);
    std::optional<FieldSchema> ReadField(const std::string& name,
                                         const Entry& entry,
                                         const std::string& path,
                                         int depth);
    std::optional<nlohmann::json> ToJson(const YAML::Node& node, const std::string& path, int depth, int& budget);
    void ReadStep(const YAML::Node& node, const std::string& path, SagaDefinition& saga);
    // The parts of a step (ReadStep); each reports its own errors and returns false on one.
    bool ReadKind(const Fields& fields, const std::string& path, const YAML::Mark& mark, StepDefinition& step);
    bool ReadSend(const Fields& fields, const std::string& path, StepDefinition& step);
    bool ReadSave(const Fields& fields, const std::string& path, StepDefinition& step);
    std::optional<CommandSpec> ReadCompensation(const Entry& entry,
                                                const std::string& path,
                                                const nlohmann::json& action_send);
    bool ReadAfter(const Fields& fields, const std::string& path, StepDefinition& step);
    std::optional<Condition> ReadCondition(const YAML::Node& node,
                                           const YAML::Mark& mark,
                                           const std::string& path,
                                           int depth);

    // --- checks over the whole saga ---
    // False when a name could not be resolved (reported): the graph is incomplete.
    bool ResolveAfter(SagaDefinition& saga);
    void CheckReferences(const SagaDefinition& saga, const StepGraph& graph);
    // Returns the input field the path names, when it names one.
    const FieldSchema* CheckPath(const std::string& expression,
                                 const YAML::Mark& mark,
                                 const std::string& path,
                                 const SagaDefinition& saga,
                                 const StepGraph& graph,
                                 std::size_t step_index,
                                 int role);
    void CheckConditionTypes(const Condition& condition,
                             const FieldSchema& field,
                             const YAML::Mark& mark,
                             const std::string& path);
    void CheckSafety(const SagaDefinition& saga, const StepGraph& graph);

    int schema_fields_left_ = kMaxSchemaFields;
    int condition_budget_ = 0;
    int document_nodes_left_ = kMaxDocumentNodes;
    std::vector<YAML::Mark> step_marks_;
    std::vector<bool> checkable_;
    // Per step: the mark of every path expression in its send/save/compensation, for references.
    std::vector<std::vector<std::tuple<std::string, YAML::Mark, std::string, int>>> expressions_;
    // Per step: the mark of `after` and of each name in it.
    std::vector<std::vector<YAML::Mark>> after_marks_;
    // Per step: each leaf of its condition with the leaf's mark and path.
    std::vector<std::vector<std::tuple<Condition, YAML::Mark, std::string>>> condition_leaves_;
};

void Loader::ReadRetry(const Fields& fields,
                       std::string_view key,
                       const std::string& parent_path,
                       RetryPolicy& policy) {
    const auto it = fields.find(std::string(key));
    if (it == fields.end()) {
        return;
    }
    const std::string path = Join(parent_path, key);
    const auto retry = Map(it->second.value, MarkOf(it->second), path, {"maxAttempts", "backoff", "jitter"});
    if (!retry) {
        return;
    }
    if (auto v = Integer(*retry, "maxAttempts", path, 1, 1000)) policy.max_attempts = static_cast<int>(*v);
    if (auto v = Number(*retry, "jitter", path, 0.0, 1.0)) policy.jitter = *v;
    if (const auto b = retry->find("backoff"); b != retry->end()) {
        const std::string backoff_path = Join(path, "backoff");
        if (const auto backoff =
                Map(b->second.value, MarkOf(b->second), backoff_path, {"initial", "max", "multiplier"})) {
            if (auto v = Duration(*backoff, "initial", backoff_path, milliseconds{1}, milliseconds{3'600'000})) {
                policy.initial_backoff = *v;
            }
            if (auto v = Duration(*backoff, "max", backoff_path, milliseconds{1}, milliseconds{86'400'000})) {
                policy.max_backoff = *v;
            }
            if (auto v = Number(*backoff, "multiplier", backoff_path, 1.0, 10.0)) policy.multiplier = *v;
            if (policy.max_backoff < policy.initial_backoff) {
                Error(MarkOf(b->second),
                      backoff_path,
                      "max (" + FormatDuration(policy.max_backoff) + ") is smaller than initial (" +
                          FormatDuration(policy.initial_backoff) + ")");
            }
        }
    }
}

std::optional<FieldType> ParseFieldType(const std::string& text) {
    static const std::map<std::string, FieldType, std::less<>> kTypes{{"string", FieldType::kString},
                                                                      {"integer", FieldType::kInteger},
                                                                      {"decimal", FieldType::kDecimal},
                                                                      {"boolean", FieldType::kBoolean},
                                                                      {"object", FieldType::kObject},
                                                                      {"array", FieldType::kArray}};
    const auto it = kTypes.find(text);
    return it == kTypes.end() ? std::nullopt : std::optional<FieldType>(it->second);
}

std::vector<FieldSchema> Loader::ReadSchema(const Entry& entry, const std::string& path, int depth) {
    std::vector<FieldSchema> out;
    if (depth > kMaxSchemaDepth) {
        Error(MarkOf(entry), path, "input schema nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
        return out;
    }
    if (!entry.value.IsMap()) {
        Error(MarkOf(entry),
              path,
              "expected a mapping of field names to field schemas, found " + std::string(KindOfNode(entry.value)));
        return out;
    }
    std::set<std::string> seen;
    for (auto it = entry.value.begin(); it != entry.value.end(); ++it) {
        const YAML::Node key = it->first;
        if (!key.IsScalar() || !text::IsFieldName(key.Scalar())) {
            Error(key.Mark(), path, "a field name is a letter or '_' followed by letters, digits or '_'");
            continue;
        }
        if (schema_fields_left_-- <= 0) {
            if (schema_fields_left_ == -1) {
                Error(key.Mark(),
                      path,
                      "the input schema has more than " + std::to_string(kMaxSchemaFields) +
                          " fields (each use of a YAML alias counts again); split the saga's input");
            }
            return out;
        }
        const std::string field_path = Join(path, key.Scalar());
        if (!seen.insert(key.Scalar()).second) {
            Error(key.Mark(), field_path, "duplicate field '" + key.Scalar() + "'");
            continue;
        }
        if (auto field = ReadField(key.Scalar(), Entry{key, it->second}, field_path, depth)) {
            out.push_back(std::move(*field));
        }
    }
    return out;
}

std::optional<FieldSchema> Loader::ReadField(const std::string& name,
                                             const Entry& entry,
                                             const std::string& path,
                                             int depth) {
    const auto fields =
        Map(entry.value, MarkOf(entry), path, {"type", "required", "default", "description", "properties", "items"});
    if (!fields) {
        return std::nullopt;
    }
    FieldSchema field;
    field.name = name;
    const auto type_text = String(*fields, "type", path, MarkOf(entry), true);
    if (!type_text) {
        return std::nullopt;
    }
    const auto type = ParseFieldType(*type_text);
    if (!type) {
        static const std::vector<std::string_view> kTypeNames{
            "string", "integer", "decimal", "boolean", "object", "array"};
        Error(MarkOf(fields->at("type")),
              Join(path, "type"),
              "unknown type " + text::Quote(*type_text) + Suggest(*type_text, kTypeNames) +
                  "; allowed: string, integer, decimal, boolean, object, array");
        return std::nullopt;
    }
    field.type = *type;
    if (const auto it = fields->find("required");
        it != fields->end() && Scalar(it->second, Join(path, "required"), "true or false")) {
        const std::string& text = it->second.value.Scalar();
        if (text == "true" || text == "false") {
            field.required = text == "true";
        } else {
            Error(MarkOf(it->second), Join(path, "required"), "expected true or false, found " + text::Quote(text));
        }
    }
    if (auto description = String(*fields, "description", path, MarkOf(entry), false)) {
        field.description = *description;
    }
    const auto properties = fields->find("properties");
    if (properties != fields->end()) {
        if (field.type != FieldType::kObject) {
            Error(properties->second.key.Mark(), Join(path, "properties"), "only an object field has properties");
        } else {
            field.properties = ReadSchema(properties->second, Join(path, "properties"), depth + 1);
        }
    }
    const auto items = fields->find("items");
    if (items != fields->end()) {
        if (field.type != FieldType::kArray) {
            Error(items->second.key.Mark(), Join(path, "items"), "only an array field has items");
        } else if (depth + 1 > kMaxSchemaDepth) {
            Error(MarkOf(items->second),
                  Join(path, "items"),
                  "input schema nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
        } else if (auto item = ReadField("items", items->second, Join(path, "items"), depth + 1)) {
            field.items.push_back(std::move(*item));
        }
    }
    if (const auto d = fields->find("default"); d != fields->end()) {
        int budget = kMaxTemplateNodes;
        if (auto value = ToJson(d->second.value, Join(path, "default"), 0, budget)) {
            FieldSchema probe = field;
            probe.default_value.reset();
            SagaDefinition scratch;
            scratch.input.push_back(probe);
            nlohmann::json wrapper{{name, *value}};
            const auto errors = ValidateInput(scratch, wrapper);
            if (!errors.empty()) {
                Error(MarkOf(d->second),
                      Join(path, "default"),
                      "the default does not fit the field's type: it " + errors.front().message);
            } else {
                field.default_value = std::move(*value);
            }
        }
        if (field.required) {
            Error(d->second.key.Mark(),
                  Join(path, "default"),
                  "a required field cannot have a default: drop 'required: true' or the default");
        }
    }
    return field;
}

// YAML to JSON for templates and defaults: plain scalars that read as numbers or booleans become
// numbers or booleans; quoted scalars stay strings.
std::optional<nlohmann::json> Loader::ToJson(const YAML::Node& node, const std::string& path, int depth, int& budget) {
    if (--budget < 0) {
        if (budget == -1) {
            Error(node.Mark(), path, "value too large: more than " + std::to_string(kMaxTemplateNodes) + " nodes");
        }
        return std::nullopt;
    }
    if (--document_nodes_left_ < 0) {
        if (document_nodes_left_ == -1) {
            Error(node.Mark(),
                  path,
                  "the definition's templates and defaults hold more than " + std::to_string(kMaxDocumentNodes) +
                      " nodes (each use of a YAML alias counts again); write smaller templates");
        }
        return std::nullopt;
    }
    if (depth > kMaxTemplateDepth) {
        Error(node.Mark(), path, "value nested deeper than " + std::to_string(kMaxTemplateDepth) + " levels");
        return std::nullopt;
    }
    switch (node.Type()) {
        case YAML::NodeType::Null:
            return nlohmann::json();
        case YAML::NodeType::Scalar: {
            const std::string& text = node.Scalar();
            if (node.Tag() == "?") {  // plain, unquoted
                if (text == "true" || text == "false") return nlohmann::json(text == "true");
                if (text == "null" || text == "~") return nlohmann::json();
                long long integer = 0;
                if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), integer);
                    ec == std::errc() && end == text.data() + text.size()) {
                    return nlohmann::json(integer);
                }
                double number = 0;
                if (auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
                    ec == std::errc() && end == text.data() + text.size() && !text.empty()) {
                    return nlohmann::json(number);
                }
            }
            return nlohmann::json(text);
        }
        case YAML::NodeType::Sequence: {
            auto out = nlohmann::json::array();
            std::size_t i = 0;
            for (const auto& child : node) {
                auto value = ToJson(child, path + "[" + std::to_string(i++) + "]", depth + 1, budget);
                if (!value) return std::nullopt;
                out.push_back(std::move(*value));
            }
            return out;
        }
        case YAML::NodeType::Map: {
            auto out = nlohmann::json::object();
            for (auto it = node.begin(); it != node.end(); ++it) {
                if (!it->first.IsScalar()) {
                    Error(it->first.Mark(), path, "a key must be a plain name");
                    return std::nullopt;
                }
                auto value = ToJson(it->second, Join(path, it->first.Scalar()), depth + 1, budget);
                if (!value) return std::nullopt;
                out[it->first.Scalar()] = std::move(*value);
            }
            return out;
        }
        default:
            return nlohmann::json();
    }
}

void CollectPaths(const YAML::Node& node,
                  const std::string& path,
                  std::vector<std::tuple<std::string, YAML::Mark, std::string, int>>& out,
                  int role,
                  int depth,
                  int& budget) {
    if (depth > kMaxTemplateDepth || --budget < 0) return;
    if (node.IsScalar() && node.Scalar().rfind("$.", 0) == 0) {
        out.emplace_back(node.Scalar(), node.Mark(), path, role);
    } else if (node.IsMap()) {
        for (auto it = node.begin(); it != node.end(); ++it) {
            if (it->first.IsScalar())
                CollectPaths(it->second, Join(path, it->first.Scalar()), out, role, depth + 1, budget);
        }
    } else if (node.IsSequence()) {
        std::size_t i = 0;
        for (const auto& child : node) {
            CollectPaths(child, path + "[" + std::to_string(i++) + "]", out, role, depth + 1, budget);
        }
    }
}

constexpr int kRoleSend = 0;
constexpr int kRoleSave = 1;
constexpr int kRoleCompensation = 2;
constexpr int kRoleWhen = 3;
constexpr int kMaxConditionDepth = 8;
constexpr int kMaxConditionNodes = 64;

std::optional<CommandSpec> Loader::ReadCompensation(const Entry& entry,
                                                    const std::string& path,
                                                    const nlohmann::json& action_send) {
    CommandSpec spec;
    if (entry.value.IsScalar()) {
        spec.type = entry.value.Scalar();
        spec.send = action_send;
    } else {
        const auto fields = Map(entry.value, MarkOf(entry), path, {"command", "send"});
        if (!fields) return std::nullopt;
        const auto type = String(*fields, "command", path, MarkOf(entry), true);
        if (!type) return std::nullopt;
        spec.type = *type;
        spec.send = action_send;
        if (const auto s = fields->find("send"); s != fields->end()) {
            if (!s->second.value.IsMap()) {
                Error(MarkOf(s->second),
                      Join(path, "send"),
                      "expected a mapping of command fields, found " + std::string(KindOfNode(s->second.value)));
                return std::nullopt;
            }
            int budget = kMaxTemplateNodes;
            auto send = ToJson(s->second.value, Join(path, "send"), 0, budget);
            if (!send) return std::nullopt;
            spec.send = std::move(*send);
            int collect_budget = kMaxTemplateNodes;
            CollectPaths(
                s->second.value, Join(path, "send"), expressions_.back(), kRoleCompensation, 0, collect_budget);
        }
    }
    if (!text::IsCommandType(spec.type)) {
        Error(MarkOf(entry),
              path,
              text::Quote(spec.type) +
                  " is not a valid command type: letters, digits and '_', optionally '.v<N>' "
                  "(e.g. RefundPayment.v1)");
        return std::nullopt;
    }
    return spec;
}

bool Loader::ReadKind(const Fields& fields, const std::string& path, const YAML::Mark& mark, StepDefinition& step) {
    const auto kind = String(fields, "kind", path, mark, true);
    if (!kind) return false;
    if (*kind == "compensatable") {
        step.kind = StepKind::kCompensatable;
    } else if (*kind == "pivot") {
        step.kind = StepKind::kPivot;
    } else if (*kind == "retriable") {
        step.kind = StepKind::kRetriable;
    } else {
        static const std::vector<std::string_view> kKinds{"compensatable", "pivot", "retriable"};
        Error(MarkOf(fields.at("kind")),
              Join(path, "kind"),
              "unknown kind " + text::Quote(*kind) + Suggest(*kind, kKinds) +
                  "; allowed: compensatable, pivot, retriable");
        return false;
    }
    return true;
}

bool Loader::ReadSend(const Fields& fields, const std::string& path, StepDefinition& step) {
    step.action.send = nlohmann::json::object();
    const auto s = fields.find("send");
    if (s == fields.end()) return true;
    if (!s->second.value.IsMap()) {
        Error(MarkOf(s->second),
              Join(path, "send"),
              "expected a mapping of command fields, found " + std::string(KindOfNode(s->second.value)));
        return false;
    }
    int budget = kMaxTemplateNodes;
    auto send = ToJson(s->second.value, Join(path, "send"), 0, budget);
    if (!send) return false;  // its paths are not checked: the template was refused whole
    step.action.send = std::move(*send);
    int collect_budget = kMaxTemplateNodes;
    CollectPaths(s->second.value, Join(path, "send"), expressions_.back(), kRoleSend, 0, collect_budget);
    return true;
}

bool Loader::ReadSave(const Fields& fields, const std::string& path, StepDefinition& step) {
    step.save = nlohmann::json::object();
    const auto s = fields.find("save");
    if (s == fields.end()) return true;
    const std::string save_path = Join(path, "save");
    if (!s->second.value.IsMap()) {
        Error(MarkOf(s->second),
              save_path,
              "expected a mapping of data keys to reply paths, found " + std::string(KindOfNode(s->second.value)));
        return false;
    }
    bool ok = true;
    for (auto it = s->second.value.begin(); it != s->second.value.end(); ++it) {
        const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
        if (!text::IsFieldName(key)) {
            Error(it->first.Mark(), save_path, "a data key is a letter or '_' followed by letters, digits or '_'");
            ok = false;
            continue;
        }
        if (!it->second.IsScalar() || it->second.Scalar().rfind("$.reply", 0) != 0) {
            Error(it->second.Mark().is_null() ? it->first.Mark() : it->second.Mark(),
                  Join(save_path, key),
                  "expected a path into this step's reply, such as $.reply.paymentId");
            ok = false;
            continue;
        }
        step.save[key] = it->second.Scalar();
        expressions_.back().emplace_back(it->second.Scalar(), it->second.Mark(), Join(save_path, key), kRoleSave);
    }
    return ok;
}

bool Loader::ReadAfter(const Fields& fields, const std::string& path, StepDefinition& step) {
    const auto a = fields.find("after");
    if (a == fields.end()) return true;
    const std::string after_path = Join(path, "after");
    std::vector<YAML::Node> names;
    if (a->second.value.IsScalar()) {
        names.push_back(a->second.value);
    } else if (a->second.value.IsSequence()) {
        for (const auto& item : a->second.value) names.push_back(item);
    } else {
        Error(MarkOf(a->second),
              after_path,
              "expected a list of step names, found " + std::string(KindOfNode(a->second.value)) +
                  " (e.g. after: [reserve-hotel, reserve-flight], or after: [] to start with the saga)");
        return false;
    }
    std::vector<std::string> after;
    after_marks_.back().push_back(MarkOf(a->second));
    for (std::size_t i = 0; i < names.size(); ++i) {
        const auto& node = names[i];
        const std::string item_path = after_path + "[" + std::to_string(i) + "]";
        if (!node.IsScalar() || !text::IsKebabName(node.Scalar())) {
            Error(node.Mark(), item_path, "expected a step name (lowercase letters, digits and '-')");
            return false;
        }
        if (std::find(after.begin(), after.end(), node.Scalar()) != after.end()) {
            Error(node.Mark(), item_path, "step '" + node.Scalar() + "' is named twice: name each step once");
            return false;
        }
        after.push_back(node.Scalar());
        after_marks_.back().push_back(node.Mark());
    }
    step.after = std::move(after);
    return true;
}

std::optional<Condition> Loader::ReadCondition(const YAML::Node& node,
                                               const YAML::Mark& mark,
                                               const std::string& path,
                                               int depth) {
    static const std::vector<std::string_view> kKeys{"path",
                                                     "equals",
                                                     "notEquals",
                                                     "in",
                                                     "exists",
                                                     "greaterThan",
                                                     "atLeast",
                                                     "lessThan",
                                                     "atMost",
                                                     "all",
                                                     "any",
                                                     "not"};
    constexpr std::string_view kForms =
        "a condition is {path: $.input.x, equals: v} (or notEquals, in, exists, greaterThan, atLeast, lessThan, "
        "atMost), {all: [..]}, {any: [..]} or {not: {..}}";
    if (depth > kMaxConditionDepth || --condition_budget_ < 0) {
        Error(mark,
              path,
              "the condition is nested deeper than " + std::to_string(kMaxConditionDepth) +
                  " levels or has more than " + std::to_string(kMaxConditionNodes) +
                  " parts: split it, or decide in a participant");
        return std::nullopt;
    }
    const auto fields = Map(node, mark, path, kKeys);
    if (!fields) return std::nullopt;
    if (fields->size() != node.size()) return std::nullopt;  // an unknown key, reported with its suggestion
    Condition c;
    std::vector<std::string> ops;
    for (const auto& [key, unused] : *fields) {
        if (key != "path") ops.push_back(key);
    }
    if (ops.size() != 1) {
        Error(mark,
              path,
              (ops.empty() ? std::string("no operator")
                           : "operators " + text::Quote(ops[0]) + " and " + text::Quote(ops[1]) + " together") +
                  ": " + std::string(kForms));
        return std::nullopt;
    }
    c.op = *ParseConditionOp(ops[0]);
    const Entry& operand = fields->at(ops[0]);
    const std::string operand_path = Join(path, ops[0]);
    if (!c.IsLeaf()) {
        if (fields->count("path") != 0) {
            Error(mark, path, "'" + ops[0] + "' combines conditions and takes no 'path': " + std::string(kForms));
            return std::nullopt;
        }
        if (c.op == Condition::Op::kNot) {
            auto inner = ReadCondition(operand.value, MarkOf(operand), operand_path, depth + 1);
            if (!inner) return std::nullopt;
            c.operands.push_back(std::move(*inner));
            return c;
        }
        if (!operand.value.IsSequence() || operand.value.size() == 0) {
            Error(MarkOf(operand), operand_path, "expected a non-empty list of conditions");
            return std::nullopt;
        }
        std::size_t i = 0;
        for (const auto& item : operand.value) {
            auto inner = ReadCondition(item, item.Mark(), operand_path + "[" + std::to_string(i++) + "]", depth + 1);
            if (!inner) return std::nullopt;
            c.operands.push_back(std::move(*inner));
        }
        return c;
    }
    const auto p = fields->find("path");
    if (p == fields->end()) {
        Error(mark, path, "'" + ops[0] + "' compares the value at a path: add 'path:', e.g. path: $.input.insurance");
        return std::nullopt;
    }
    if (!p->second.value.IsScalar() || p->second.value.Scalar().rfind("$.", 0) != 0) {
        Error(MarkOf(p->second), Join(path, "path"), "expected a path such as $.input.insurance");
        return std::nullopt;
    }
    c.path = p->second.value.Scalar();
    int budget = kMaxTemplateNodes;
    auto value = ToJson(operand.value, operand_path, 0, budget);
    if (!value) return std::nullopt;
    c.value = std::move(*value);
    const auto scalar = [](const nlohmann::json& v) { return v.is_string() || v.is_number() || v.is_boolean(); };
    std::string problem;
    if (c.op == Condition::Op::kExists) {
        if (!c.value.is_boolean()) problem = "'exists' takes true or false";
    } else if (c.op == Condition::Op::kIn) {
        if (!c.value.is_array() || c.value.empty() || !std::all_of(c.value.begin(), c.value.end(), scalar)) {
            problem = "'in' takes a non-empty list of strings, numbers or booleans";
        }
    } else if (IsOrdering(c.op)) {
        if (!c.value.is_number() && !(c.value.is_string() && text::IsDecimal(c.value.get<std::string>()))) {
            problem = "'" + ops[0] + "' compares numbers: give a number or a decimal such as \"10.50\"";
        }
    } else if (c.value.is_null()) {
        problem = "compare with a value; to test for absence use 'exists: false'";
    } else if (!scalar(c.value)) {
        problem = "'" + ops[0] + "' compares with a string, a number or a boolean";
    }
    if (!problem.empty()) {
        Error(MarkOf(operand), operand_path, problem);
        return std::nullopt;
    }
    expressions_.back().emplace_back(c.path, MarkOf(p->second), Join(path, "path"), kRoleWhen);
    condition_leaves_.back().emplace_back(c, MarkOf(operand), operand_path);
    return c;
}

bool Loader::ResolveAfter(SagaDefinition& saga) {
    bool resolved = true;
    std::vector<std::string> names;
    for (const auto& step : saga.steps) names.push_back(step.name);
    for (std::size_t i = 0; i < saga.steps.size(); ++i) {
        auto& step = saga.steps[i];
        if (!step.after) continue;
        const std::string path = "steps[" + std::to_string(i) + "].after";
        bool ok = true;
        for (std::size_t k = 0; k < step.after->size(); ++k) {
            const std::string& name = (*step.after)[k];
            const YAML::Mark mark = after_marks_[i][k + 1];
            const std::string item = path + "[" + std::to_string(k) + "]";
            if (name == step.name) {
                Error(mark, item, "step '" + name + "' cannot wait for itself: remove it from 'after'");
                ok = false;
            } else if (std::find(names.begin(), names.end(), name) == names.end()) {
                Error(mark, item, "no step named " + text::Quote(name) + Suggest(name, names));
                ok = false;
            }
        }
        resolved = resolved && ok;
        if (!ok) continue;
        std::sort(step.after->begin(), step.after->end());
        // Waiting for the step listed before (or, first, for nothing) is what no `after` means: one
        // meaning, one canonical form and hash.
        const std::vector<std::string> implicit =
            i == 0 ? std::vector<std::string>{} : std::vector<std::string>{saga.steps[i - 1].name};
        if (*step.after == implicit) step.after.reset();
    }
    return resolved;
}

void Loader::ReadStep(const YAML::Node& node, const std::string& path, SagaDefinition& saga) {
    step_marks_.push_back(node.Mark());
    expressions_.emplace_back();
    after_marks_.emplace_back();
    condition_leaves_.emplace_back();
    const auto fields = Map(node,
                            node.Mark(),
                            path,
                            {"name",
                             "participant",
                             "command",
                             "compensation",
                             "kind",
                             "after",
                             "when",
                             "send",
                             "save",
                             "timeout",
                             "startTimeout",
                             "retry"});
    StepDefinition step;
    step.timeout = saga.timeout;
    step.start_timeout = saga.start_timeout;
    step.retry = saga.retry;
    bool ok = fields.has_value();
    bool kind_known = false;
    if (fields) {
        const YAML::Mark mark = node.Mark();
        constexpr std::string_view kNameHint = "lowercase letters, digits and '-', starting with a letter";
        auto name = String(*fields, "name", path, mark, true, kValidName, kNameHint);
        auto participant = String(*fields, "participant", path, mark, true, kValidName, kNameHint);
        auto command = String(*fields,
                              "command",
                              path,
                              mark,
                              true,
                              &text::IsCommandType,
                              "letters, digits and '_', optionally '.v<N>' (e.g. ChargePayment.v1)");
        ok = name && participant && command;
        if (name) step.name = *name;
        if (participant) step.participant = *participant;
        if (command) step.action.type = *command;
        kind_known = ReadKind(*fields, path, mark, step);
        ok = ReadSend(*fields, path, step) && kind_known && ok;
        ok = ReadSave(*fields, path, step) && ok;
        if (const auto c = fields->find("compensation"); c != fields->end()) {
            auto compensation = ReadCompensation(c->second, Join(path, "compensation"), step.action.send);
            ok = ok && compensation.has_value();
            step.compensation = std::move(compensation);
        }
        if (auto v = Duration(*fields, "timeout", path, milliseconds{100}, milliseconds{86'400'000})) step.timeout = *v;
        if (auto v = Duration(*fields, "startTimeout", path, milliseconds{1'000}, milliseconds{7 * 86'400'000LL})) {
            step.start_timeout = *v;
        }
        ReadRetry(*fields, "retry", path, step.retry);
        ok = ReadAfter(*fields, path, step) && ok;
        if (const auto w = fields->find("when"); w != fields->end()) {
            condition_budget_ = kMaxConditionNodes;
            step.when = ReadCondition(w->second.value, MarkOf(w->second), Join(path, "when"), 0);
            ok = step.when.has_value() && ok;
        }
    }
    // A broken step keeps its place so later checks see the right indices; the safety check skips
    // a step whose name or kind is unknown, so one mistake is not reported twice.
    checkable_.push_back(fields.has_value() && !step.name.empty() && kind_known);
    saga.steps.push_back(std::move(step));
}

const FieldSchema* Loader::CheckPath(const std::string& expression,
                                     const YAML::Mark& mark,
                                     const std::string& path,
                                     const SagaDefinition& saga,
                                     const StepGraph& graph,
                                     std::size_t step_index,
                                     int role) {
    const bool in_compensation = role == kRoleCompensation;
    std::vector<std::string> segments;
    std::stringstream in(expression.substr(2));
    for (std::string segment; std::getline(in, segment, '.');) {
        segments.push_back(segment);
    }
    if (segments.empty() || expression.back() == '.' ||
        std::any_of(segments.begin(), segments.end(), [](const auto& s) { return !text::IsPathSegment(s); })) {
        Error(mark, path, "malformed path " + text::Quote(expression) + ": segments are names joined by '.'");
        return nullptr;
    }
    const std::string& root = segments[0];
    const std::string& reader = saga.steps[step_index].name;
    const std::string when = role == kRoleWhen ? "decides whether it runs" : "sends its command";
    if (role == kRoleSave) {
        if (root != "reply") Error(mark, path, "save takes paths into this step's reply ($.reply...)");
        return nullptr;
    }
    if (root == "sagaId" || root == "sagaType") {
        if (segments.size() > 1) Error(mark, path, "$." + root + " is a string and has no fields");
        return nullptr;
    }
    if (root == "input") {
        if (segments.size() < 2) return nullptr;  // the whole input
        const std::vector<FieldSchema>* fields = &saga.input;
        for (std::size_t i = 1; i < segments.size(); ++i) {
            const auto it =
                std::find_if(fields->begin(), fields->end(), [&](const auto& f) { return f.name == segments[i]; });
            if (it == fields->end()) {
                std::vector<std::string> names;
                for (const auto& f : *fields) names.push_back(f.name);
                Error(mark,
                      path,
                      text::Quote(expression) + " refers to unknown input field " + text::Quote(segments[i]) +
                          Suggest(segments[i], names));
                return nullptr;
            }
            if (i + 1 == segments.size()) return &*it;
            if (it->type != FieldType::kObject) return nullptr;  // deeper segments are not checked
            fields = &it->properties;
        }
        return nullptr;
    }
    // Whether `writer` is certain to have run when the reader reads: one of the steps it waits for
    // (directly or through others), or, for a compensation, its own step.
    const auto ran_before = [&](std::size_t writer) {
        return graph.Before(writer, step_index) || (in_compensation && writer == step_index);
    };
    if (root == "data") {
        if (segments.size() < 2) return nullptr;
        const std::string& key = segments[1];
        std::vector<std::string> saved;
        std::optional<std::size_t> certain, conditional, concurrent;
        for (std::size_t i = 0; i < saga.steps.size(); ++i) {
            if (ran_before(i)) {
                for (const auto& [k, unused] : saga.steps[i].save.items()) saved.push_back(k);
            }
            if (!saga.steps[i].save.contains(key)) continue;
            if (ran_before(i)) {
                (saga.steps[i].when && i != step_index ? conditional : certain) = i;
            } else if (graph.Concurrent(i, step_index) && !concurrent) {
                concurrent = i;
            }
        }
        if (concurrent) {
            Error(mark,
                  path,
                  text::Quote(expression) + " reads data key " + text::Quote(key) + " that step '" +
                      saga.steps[*concurrent].name + "' saves, and that step may run at the same time as step '" +
                      reader + "': add '" + saga.steps[*concurrent].name + "' to the 'after' of '" + reader + "'");
        } else if (certain) {
            return nullptr;
        } else if (conditional) {
            Error(mark,
                  path,
                  text::Quote(expression) + " reads data key " + text::Quote(key) + " that only step '" +
                      saga.steps[*conditional].name +
                      "' saves, and that step has a 'when:' and may be skipped: read the key only from steps "
                      "that always run, or save it in one");
        } else {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to data key " + text::Quote(key) + " that no earlier step saves" +
                      Suggest(key, saved));
        }
        return nullptr;
    }
    if (root == "steps") {
        if (segments.size() < 3 || segments[2] != "reply") {
            Error(mark, path, "a step path reads $.steps.<step>.reply.<field>");
            return nullptr;
        }
        const std::string& target = segments[1];
        std::vector<std::string> names;
        std::size_t index = saga.steps.size();
        for (std::size_t i = 0; i < saga.steps.size(); ++i) {
            names.push_back(saga.steps[i].name);
            if (saga.steps[i].name == target) index = i;
        }
        if (index == saga.steps.size()) {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to unknown step " + text::Quote(target) + Suggest(target, names));
        } else if (graph.Linear() && (index > step_index || (index == step_index && !in_compensation))) {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to step " + text::Quote(target) +
                      ", which has not run yet when step '" + reader + "' " + when);
        } else if (!ran_before(index)) {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to step " + text::Quote(target) +
                      ", which is not certain to have run when step '" + reader + "' " + when +
                      (graph.Before(step_index, index) ? " (it runs after it)" : " (they may run at the same time)") +
                      ": add '" + target + "' to the 'after' of '" + reader + "'");
        } else if (saga.steps[index].when && index != step_index) {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to step " + text::Quote(target) +
                      ", which has a 'when:' and may be skipped, so its reply may not exist: read replies only "
                      "of steps that always run, or save what you need in one");
        }
        return nullptr;
    }
    static const std::vector<std::string_view> kRoots{"sagaId", "sagaType", "input", "data", "steps"};
    Error(mark,
          path,
          text::Quote(expression) + " starts with unknown root " + text::Quote(root) + Suggest(root, kRoots) +
              "; paths start with $.sagaId, $.input, $.data or $.steps");
    return nullptr;
}

void Loader::CheckConditionTypes(const Condition& c,
                                 const FieldSchema& field,
                                 const YAML::Mark& mark,
                                 const std::string& path) {
    if (c.op == Condition::Op::kExists) return;
    const std::string what = text::Quote(c.path) + " is " + std::string(ToString(field.type)) + " input field";
    if (field.type == FieldType::kObject || field.type == FieldType::kArray) {
        Error(mark, path, what + ": compare a field inside it, or test it with 'exists'");
        return;
    }
    if (IsOrdering(c.op)) {
        if (field.type != FieldType::kInteger && field.type != FieldType::kDecimal) {
            Error(mark,
                  path,
                  what + ", but '" + std::string(ToString(c.op)) +
                      "' compares numbers: use equals, notEquals or in, or compare an integer or decimal field");
        }
        return;
    }
    const auto fits = [&](const nlohmann::json& v) {
        switch (field.type) {
            case FieldType::kString:
                return v.is_string();
            case FieldType::kInteger:
                return v.is_number_integer();
            case FieldType::kDecimal:
                return v.is_number() || (v.is_string() && text::IsDecimal(v.get_ref<const std::string&>()));
            case FieldType::kBoolean:
                return v.is_boolean();
            default:
                return false;
        }
    };
    const nlohmann::json values = c.op == Condition::Op::kIn ? c.value : nlohmann::json::array({c.value});
    for (const auto& v : values) {
        if (!fits(v)) {
            Error(mark,
                  path,
                  what + ", so it can never equal " + text::Quote(v.dump(), 60, false) + ": compare it with " +
                      (field.type == FieldType::kBoolean   ? "true or false"
                       : field.type == FieldType::kInteger ? "an integer"
                       : field.type == FieldType::kDecimal ? "a decimal such as \"10.50\""
                                                           : "a string"));
            return;
        }
    }
}

void Loader::CheckReferences(const SagaDefinition& saga, const StepGraph& graph) {
    for (std::size_t i = 0; i < expressions_.size() && i < saga.steps.size(); ++i) {
        std::size_t leaf = 0;
        for (const auto& [expression, mark, path, role] : expressions_[i]) {
            const FieldSchema* field = CheckPath(expression, mark, path, saga, graph, i, role);
            if (role != kRoleWhen) continue;
            const auto& [condition, value_mark, value_path] = condition_leaves_[i][leaf++];
            if (field != nullptr) CheckConditionTypes(condition, *field, value_mark, value_path);
        }
    }
}

void Loader::CheckSafety(const SagaDefinition& saga, const StepGraph& graph) {
    const auto mark_of = [&](std::size_t i) { return step_marks_[i]; };
    const auto path_of = [](std::size_t i) { return "steps[" + std::to_string(i) + "]"; };
    std::optional<std::size_t> pivot;
    for (std::size_t i = 0; i < saga.steps.size(); ++i) {
        const auto& step = saga.steps[i];
        if (!checkable_[i]) continue;  // already reported
        const YAML::Mark mark = mark_of(i);
        const std::string path = path_of(i);
        const std::string who = "step '" + step.name + "'";
        // The first step of the point of no return that runs before this one, or at the same time.
        std::optional<std::size_t> pivot_before, retriable_before, pivot_beside, retriable_beside;
        for (std::size_t j = 0; j < saga.steps.size(); ++j) {
            if (!checkable_[j] || j == i || saga.steps[j].kind == StepKind::kCompensatable) continue;
            const bool before = graph.Before(j, i);
            if (!before && !graph.Concurrent(i, j)) continue;  // runs after this one: reported from there
            const bool is_pivot = saga.steps[j].kind == StepKind::kPivot;
            auto& slot =
                before ? (is_pivot ? pivot_before : retriable_before) : (is_pivot ? pivot_beside : retriable_beside);
            if (!slot) slot = j;
        }
        const auto name = [&](std::optional<std::size_t> j) { return saga.steps[*j].name; };
        switch (step.kind) {
            case StepKind::kCompensatable:
                if (!step.compensation) {
                    Error(mark,
                          path,
                          who +
                              " is compensatable but has no compensation: add 'compensation:', or make "
                              "it the pivot if it is the point of no return.");
                }
                if (pivot_before) {
                    Error(mark,
                          path,
                          who + " comes after the pivot '" + name(pivot_before) +
                              "' but is not retriable: after the point of no return every step must be "
                              "retried until it succeeds.");
                } else if (retriable_before) {
                    Error(mark,
                          path,
                          who + " is compensatable but comes after retriable step '" + name(retriable_before) +
                              "': once a retriable step has run the saga cannot be undone.");
                } else if (pivot_beside || retriable_beside) {
                    const auto j = pivot_beside ? pivot_beside : retriable_beside;
                    Error(mark,
                          path,
                          who + " is compensatable but may run at the same time as " +
                              (pivot_beside ? "the pivot '" : "retriable step '") + name(j) +
                              "': every compensatable step must finish before the point of no return. Add '" +
                              step.name + "' to the 'after' of '" + name(j) + "'.");
                }
                break;
            case StepKind::kPivot:
                if (step.compensation) {
                    Error(mark,
                          path,
                          who +
                              " is the pivot, the point of no return, so it cannot have a "
                              "compensation: remove 'compensation:' or make it compensatable.");
                }
                if (pivot) {
                    Error(mark,
                          path,
                          who + " is a second pivot after '" + saga.steps[*pivot].name +
                              "': a saga has at most one pivot.");
                } else {
                    pivot = i;
                    if (retriable_before) {
                        Error(mark,
                              path,
                              who + " is the pivot but comes after retriable step '" + name(retriable_before) +
                                  "': every step before the pivot must be compensatable.");
                    } else if (retriable_beside) {
                        Error(mark,
                              path,
                              who + " is the pivot but retriable step '" + name(retriable_beside) +
                                  "' may run at the same time: the point of no return is one point. Add '" + step.name +
                                  "' to the 'after' of '" + name(retriable_beside) + "'.");
                    }
                }
                break;
            case StepKind::kRetriable:
                if (step.compensation) {
                    Error(mark,
                          path,
                          who +
                              " is retriable and is never compensated (it runs after the point of no "
                              "return): remove 'compensation:'.");
                }
                break;
        }
    }
    // Two steps that may run at the same time may not save the same data key: which value stays
    // would depend on the order of their replies.
    for (std::size_t j = 0; j < saga.steps.size(); ++j) {
        for (std::size_t i = 0; i < j; ++i) {
            if (!graph.Concurrent(i, j)) continue;
            for (const auto& [key, unused] : saga.steps[j].save.items()) {
                if (!saga.steps[i].save.contains(key)) continue;
                Error(mark_of(j),
                      path_of(j) + ".save." + key,
                      "steps '" + saga.steps[i].name + "' and '" + saga.steps[j].name +
                          "' may run at the same time and both save data key '" + key +
                          "': which value stays would depend on which replies first. Save it under two keys, or "
                          "order the steps with 'after'.");
            }
        }
    }
}

LoadResult Loader::Run(std::string_view text) {
    LoadResult result;
    const auto parsed = Parse(text);
    if (!parsed) {
        result.diagnostics = TakeDiagnostics();
        return result;
    }
    const YAML::Node& root = *parsed;
    if (root.IsNull()) {
        Error(YAML::Mark::null_mark(), "", "the file is empty: a saga definition needs at least 'saga' and 'steps'");
        result.diagnostics = TakeDiagnostics();
        return result;
    }
    SagaDefinition saga;
    const auto fields =
        Map(root, root.Mark(), "", {"saga", "version", "description", "input", "defaults", "deadline", "steps"});
    if (!fields) {
        result.diagnostics = TakeDiagnostics();
        return result;
    }
    if (auto name = String(*fields,
                           "saga",
                           "",
                           root.Mark(),
                           true,
                           kValidName,
                           "lowercase letters, digits and '-', starting with a letter (it appears in URLs)")) {
        saga.name = *name;
    }
    if (fields->count("version") == 0) {
        Error(root.Mark(), "", "missing required key 'version'");
    } else if (auto version = Integer(*fields, "version", "", 1, 1'000'000)) {
        saga.version = static_cast<int>(*version);
    }
    if (auto description = String(*fields, "description", "", root.Mark(), false)) saga.description = *description;
    saga.deadline = Duration(*fields, "deadline", "", milliseconds{1'000}, milliseconds{30LL * 86'400'000});
    if (const auto input = fields->find("input"); input != fields->end()) {
        saga.input = ReadSchema(input->second, "input", 0);
    }
    RetryPolicy compensation_retry;
    compensation_retry.max_attempts = 20;
    compensation_retry.initial_backoff = milliseconds{500};
    compensation_retry.max_backoff = milliseconds{60'000};
    saga.compensation_retry = compensation_retry;
    if (const auto defaults = fields->find("defaults"); defaults != fields->end()) {
        if (const auto d = Map(defaults->second.value,
                               MarkOf(defaults->second),
                               "defaults",
                               {"timeout", "startTimeout", "retry", "compensationRetry"})) {
            if (auto v = Duration(*d, "timeout", "defaults", milliseconds{100}, milliseconds{86'400'000})) {
                saga.timeout = *v;
            }
            saga.start_timeout =
                Duration(*d, "startTimeout", "defaults", milliseconds{1'000}, milliseconds{7 * 86'400'000LL});
            ReadRetry(*d, "retry", "defaults", saga.retry);
            ReadRetry(*d, "compensationRetry", "defaults", saga.compensation_retry);
        }
    }
    const auto steps = fields->find("steps");
    if (steps == fields->end()) {
        Error(root.Mark(), "", "missing required key 'steps'");
    } else if (!steps->second.value.IsSequence()) {
        Error(MarkOf(steps->second),
              "steps",
              "expected a list of steps, found " + std::string(KindOfNode(steps->second.value)));
    } else if (steps->second.value.size() == 0) {
        Error(MarkOf(steps->second), "steps", "the step list is empty: a saga needs at least one step");
    } else if (steps->second.value.size() > kMaxSteps) {
        Error(MarkOf(steps->second),
              "steps",
              "the step list has " + std::to_string(steps->second.value.size()) + " steps, more than " +
                  std::to_string(kMaxSteps) + ": split the saga");
    } else {
        std::size_t i = 0;
        for (const auto& step : steps->second.value) {
            ReadStep(step, "steps[" + std::to_string(i++) + "]", saga);
        }
        std::map<std::string, std::size_t> seen;
        for (std::size_t k = 0; k < saga.steps.size(); ++k) {
            const auto& name = saga.steps[k].name;
            if (name.empty()) continue;
            if (const auto [it, fresh] = seen.emplace(name, k); !fresh) {
                Error(step_marks_[k],
                      "steps[" + std::to_string(k) + "].name",
                      "duplicate step name '" + name + "' (also steps[" + std::to_string(it->second) + "])");
            }
        }
        const bool resolved = ResolveAfter(saga);
        const StepGraph graph(saga);
        if (!resolved) {
            // The checks below need every step's place in the graph.
        } else if (!graph.Cycle().empty()) {
            std::string cycle;
            for (const auto k : graph.Cycle()) cycle += "'" + saga.steps[k].name + "' → ";
            cycle += "'" + saga.steps[graph.Cycle().front()].name + "'";
            const std::size_t first = graph.Cycle().front();
            Error(after_marks_[first].empty() ? step_marks_[first] : after_marks_[first].front(),
                  "steps[" + std::to_string(first) + "].after",
                  "steps " + cycle +
                      " wait for each other in a cycle, so none of them can ever run: remove one "
                      "of these names from an 'after'");
        } else {
            CheckReferences(saga, graph);
            CheckSafety(saga, graph);
        }
        for (std::size_t k = 0; saga.deadline && k < saga.steps.size(); ++k) {
            if (!graph.Parents(k).empty() || saga.steps[k].kind == StepKind::kCompensatable) continue;
            Error(MarkOf(fields->at("deadline")),
                  "deadline",
                  std::string(k == 0 ? "the first step '" : "step '") + saga.steps[k].name + "' is " +
                      std::string(ToString(saga.steps[k].kind)) + (k == 0 ? "" : " and starts with the saga") +
                      ": the saga is past its point of no return from the start, so a deadline could never cancel "
                      "it. Remove 'deadline:'.");
            break;
        }
    }
    if (diagnostics_.empty()) {
        saga.hash = detail::CanonicalHash(saga.Canonical());
        result.definition = std::move(saga);
    }
    result.diagnostics = TakeDiagnostics();
    return result;
}

}  // namespace

LoadResult LoadDefinitionString(std::string_view text, std::string_view source_name) {
    return Loader(std::string(source_name)).Run(text);
}

LoadResult LoadDefinitionFile(const std::filesystem::path& path) {
    LoadResult result;
    const auto text = detail::ReadDocumentFile(path, DefinitionKind(), result.diagnostics);
    return text ? LoadDefinitionString(*text, path.string()) : result;
}

SagaDefinition LoadDefinitionOrThrow(const std::filesystem::path& path) {
    auto result = LoadDefinitionFile(path);
    if (!result.definition) {
        throw DefinitionError(std::move(result.diagnostics));
    }
    return std::move(*result.definition);
}

}  // namespace sagaflow
