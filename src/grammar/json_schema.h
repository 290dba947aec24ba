// JSON Schema → grammar: the rules of the JSON texts valid against a schema (or of the same
// values in Gemma's notation, JsonGrammarOptions::notation).
//
// The subset (what OpenAI's strict structured outputs allow, and the same keywords in
// non-strict schemas; strict and non-strict compile alike):
//  - type: object, array, string, number, integer, boolean, null, or a list of them;
//    without `type`, the type follows from the other keywords (properties → object,
//    items → array, minLength → string), and a schema with none of them (`{}`, `true`)
//    is any JSON value;
//  - object: properties (written in the schema's order, or in the one the notation sorts
//    keys in: json_rules.h), required (others may be left out), additionalProperties:
//    false, true, absent or a schema. Extra properties are
//    never written when `properties` is given: whatever additionalProperties says, an
//    object with only declared properties validates. Without `properties`, false is `{}`,
//    a schema is a map of string keys to it, and true or absent is any object. A required
//    name missing from `properties` takes the additionalProperties schema (refused when
//    that is false);
//  - array: items (a schema), minItems, maxItems;
//  - string: minLength, maxLength (in characters);
//  - enum, const (any JSON values; matched as their compact text in the notation);
//  - anyOf; allOf with one schema (a common wrapper of $ref); $ref to "#", "#/$defs/…",
//    "#/definitions/…" or any JSON pointer into the same document, recursive ones
//    included;
//  - annotations and keywords of no meaning to validation are ignored: title, description,
//    default, examples, $comment, $schema, $id, deprecated, readOnly, writeOnly, format
//    (an annotation unless a validator opts in), and any keyword JSON Schema does not
//    define (validators ignore those too).
// Refused, with kInvalidArgument naming the keyword and the schema path: pattern,
// patternProperties, propertyNames, min/maxProperties, minimum and maximum of a number or
// of an integer range without 0 (an integer range with 0 is kept to the digits and sign
// it allows), exclusiveMinimum, exclusiveMaximum, multipleOf, oneOf, allOf of several schemas, not,
// if/then/else, dependent*, contains, prefixItems and items as a list, unevaluated*, uniqueItems:
// true, $ref outside the document, `false` as a schema, minItems or minLength above
// kMaxExpandedCount. maxItems and maxLength above it are lowered to it.
// Bounds of the output itself (json_rules.h): bounded whitespace, numbers that fit a
// double, nesting of at most max_depth containers; a recursive schema is unrolled to that
// depth (refused if it has no instance within it).
//
// Thread safety: free functions. Lifetime: the grammar copies what it needs.
#pragma once

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/json_rules.h"

namespace shardlm::grammar {

// Adds the rules of a value valid against `schema`, which is its own document ("#" refs
// resolve in it), placed at nesting depth `depth` (0: the whole output). Returns the
// value's rule. Errors name the keyword and its path inside `schema` ("#/properties/a").
Result<RuleId> AddJsonSchema(JsonRules& rules, const Json& schema, int depth = 0);

// The grammar of one JSON text valid against `schema`.
Result<Grammar> JsonSchemaGrammar(const Json& schema, const JsonGrammarOptions& options = {});
// The grammar of any JSON object (response_format json_object).
Result<Grammar> JsonObjectGrammar(const JsonGrammarOptions& options = {});

}  // namespace shardlm::grammar
