#include "core/definition_loader.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "core/canonical.hpp"
#include "core/detail/yaml_reader.hpp"
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

    // --- checks over the whole saga ---
    void CheckReferences(const SagaDefinition& saga);
    void CheckPath(const std::string& expression,
                   const YAML::Mark& mark,
                   const std::string& path,
                   const SagaDefinition& saga,
                   std::size_t step_index,
                   bool in_save,
                   bool in_compensation);
    void CheckSafety(const SagaDefinition& saga);

    int schema_fields_left_ = kMaxSchemaFields;
    int document_nodes_left_ = kMaxDocumentNodes;
    std::vector<YAML::Mark> step_marks_;
    std::vector<bool> checkable_;
    // Per step: the mark of every path expression in its send/save/compensation, for references.
    std::vector<std::vector<std::tuple<std::string, YAML::Mark, std::string, int>>> expressions_;
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

void Loader::ReadStep(const YAML::Node& node, const std::string& path, SagaDefinition& saga) {
    step_marks_.push_back(node.Mark());
    expressions_.emplace_back();
    const auto fields = Map(
        node,
        node.Mark(),
        path,
        {"name", "participant", "command", "compensation", "kind", "send", "save", "timeout", "startTimeout", "retry"});
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
    }
    // A broken step keeps its place so later checks see the right indices; the safety check skips
    // a step whose name or kind is unknown, so one mistake is not reported twice.
    checkable_.push_back(fields.has_value() && !step.name.empty() && kind_known);
    saga.steps.push_back(std::move(step));
}

void Loader::CheckPath(const std::string& expression,
                       const YAML::Mark& mark,
                       const std::string& path,
                       const SagaDefinition& saga,
                       std::size_t step_index,
                       bool in_save,
                       bool in_compensation) {
    std::vector<std::string> segments;
    std::stringstream in(expression.substr(2));
    for (std::string segment; std::getline(in, segment, '.');) {
        segments.push_back(segment);
    }
    if (segments.empty() || expression.back() == '.' ||
        std::any_of(segments.begin(), segments.end(), [](const auto& s) { return !text::IsPathSegment(s); })) {
        Error(mark, path, "malformed path " + text::Quote(expression) + ": segments are names joined by '.'");
        return;
    }
    const std::string& root = segments[0];
    if (in_save) {
        if (root != "reply") Error(mark, path, "save takes paths into this step's reply ($.reply...)");
        return;
    }
    if (root == "sagaId" || root == "sagaType") {
        if (segments.size() > 1) Error(mark, path, "$." + root + " is a string and has no fields");
        return;
    }
    if (root == "input") {
        if (segments.size() < 2) return;  // the whole input
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
                return;
            }
            if (it->type != FieldType::kObject) return;  // deeper segments are not checked
            fields = &it->properties;
        }
        return;
    }
    if (root == "data") {
        if (segments.size() < 2) return;
        std::vector<std::string> saved;
        // An action sees what earlier steps saved; a compensation also what its own step saved.
        const std::size_t limit = in_compensation ? step_index + 1 : step_index;
        for (std::size_t i = 0; i < limit && i < saga.steps.size(); ++i) {
            for (const auto& [key, unused] : saga.steps[i].save.items()) saved.push_back(key);
        }
        if (std::find(saved.begin(), saved.end(), segments[1]) == saved.end()) {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to data key " + text::Quote(segments[1]) +
                      " that no earlier step saves" + Suggest(segments[1], saved));
        }
        return;
    }
    if (root == "steps") {
        if (segments.size() < 3 || segments[2] != "reply") {
            Error(mark, path, "a step path reads $.steps.<step>.reply.<field>");
            return;
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
        } else if (index > step_index || (index == step_index && !in_compensation)) {
            Error(mark,
                  path,
                  text::Quote(expression) + " refers to step " + text::Quote(target) +
                      ", which has not run yet when step '" + saga.steps[step_index].name + "' sends its command");
        }
        return;
    }
    static const std::vector<std::string_view> kRoots{"sagaId", "sagaType", "input", "data", "steps"};
    Error(mark,
          path,
          text::Quote(expression) + " starts with unknown root " + text::Quote(root) + Suggest(root, kRoots) +
              "; paths start with $.sagaId, $.input, $.data or $.steps");
}

void Loader::CheckReferences(const SagaDefinition& saga) {
    for (std::size_t i = 0; i < expressions_.size() && i < saga.steps.size(); ++i) {
        for (const auto& [expression, mark, path, role] : expressions_[i]) {
            CheckPath(expression, mark, path, saga, i, role == kRoleSave, role == kRoleCompensation);
        }
    }
}

void Loader::CheckSafety(const SagaDefinition& saga) {
    std::optional<std::size_t> pivot;
    std::optional<std::size_t> first_retriable;
    for (std::size_t i = 0; i < saga.steps.size(); ++i) {
        const auto& step = saga.steps[i];
        if (!checkable_[i]) continue;  // already reported
        const YAML::Mark mark = step_marks_[i];
        const std::string path = "steps[" + std::to_string(i) + "]";
        const std::string who = "step '" + step.name + "'";
        switch (step.kind) {
            case StepKind::kCompensatable:
                if (!step.compensation) {
                    Error(mark,
                          path,
                          who +
                              " is compensatable but has no compensation: add 'compensation:', or make "
                              "it the pivot if it is the point of no return.");
                }
                if (pivot) {
                    Error(mark,
                          path,
                          who + " comes after the pivot '" + saga.steps[*pivot].name +
                              "' but is not retriable: after the point of no return every step must be "
                              "retried until it succeeds.");
                } else if (first_retriable) {
                    Error(mark,
                          path,
                          who + " is compensatable but comes after retriable step '" +
                              saga.steps[*first_retriable].name +
                              "': once a retriable step has run the saga cannot be undone.");
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
                } else if (first_retriable) {
                    Error(mark,
                          path,
                          who + " is the pivot but comes after retriable step '" + saga.steps[*first_retriable].name +
                              "': every step before the pivot must be compensatable.");
                } else {
                    pivot = i;
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
                if (!first_retriable) first_retriable = i;
                break;
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
        CheckReferences(saga);
        CheckSafety(saga);
        if (saga.deadline && !saga.steps.empty() && saga.steps[0].kind != StepKind::kCompensatable) {
            Error(MarkOf(fields->at("deadline")),
                  "deadline",
                  "the first step '" + saga.steps[0].name + "' is " + std::string(ToString(saga.steps[0].kind)) +
                      ": the saga is past its point of no return from the start, so a deadline could never cancel "
                      "it. Remove 'deadline:'.");
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
