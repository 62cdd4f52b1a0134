/* sg_schema: a tool's args are refused with every problem named by path
 * and rule, and a schema outside the supported subset is refused when it
 * is loaded, naming the place inside it.  JSON texts here are written
 * with ' for " to stay readable; j() swaps them back. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sagad/sg_schema.h"
#include "unit.h"

#define MAX_FOUND 80

typedef struct found_s {
    int n;
    char path[MAX_FOUND][256];
    char rule[MAX_FOUND][128];
} found_t;

/* Parses text with every ' turned into ". */
static sg_json_t *j(const char *text)
{
    size_t len = strlen(text);
    char *buf = malloc(len + 1);
    sg_json_t *root;
    sg_err_t err;

    cr_assert_not_null(buf);
    for (size_t i = 0; i <= len; i++)
        buf[i] = text[i] == '\'' ? '"' : text[i];
    root = sg_json_parse(buf, len, NULL, &err);
    cr_assert_not_null(root, "test text %s: %s", text, err.message);
    free(buf);
    return root;
}

static void collect(void *opaque, const char *path, const char *rule)
{
    found_t *f = opaque;

    cr_assert_lt(f->n, MAX_FOUND, "more problems than the limit");
    snprintf(f->path[f->n], sizeof(f->path[0]), "%s", path);
    snprintf(f->rule[f->n], sizeof(f->rule[0]), "%s", rule);
    f->n++;
}

/* Checks schema (which must pass) and validates doc from base "$.args";
 * returns what sg_schema_validate returned. */
static int run(const char *schema_text, const char *doc_text, found_t *f)
{
    sg_json_t *schema = j(schema_text), *doc = j(doc_text);
    sg_err_t err;
    int n;

    cr_assert_eq(sg_schema_check(schema, "$.args", &err), 0, "schema %s: %s", schema_text,
                 err.message);
    memset(f, 0, sizeof(*f));
    n = sg_schema_validate(schema, doc, "$.args", collect, f);
    cr_assert_eq(n, f->n, "return value and callback count differ");
    sg_json_destroy(doc);
    sg_json_destroy(schema);
    return n;
}

/* Validating doc yields exactly the listed problems, in order: pairs of
 * path and rule ended by NULL (just NULL for a valid doc). */
static void __attribute__((sentinel)) expect(const char *schema, const char *doc, ...)
{
    found_t f;
    int n = run(schema, doc, &f), i = 0;
    const char *path;
    va_list ap;

    va_start(ap, doc);
    for (; (path = va_arg(ap, const char *)) != NULL; i++) {
        const char *rule = va_arg(ap, const char *);

        cr_assert_lt(i, n, "%s against %s: missing problem %s \"%s\"", doc, schema, path, rule);
        cr_expect_str_eq(f.path[i], path, "%s: problem %d path", doc, i);
        cr_expect_str_eq(f.rule[i], rule, "%s: problem %d rule", doc, i);
    }
    va_end(ap);
    cr_assert_eq(n, i, "%s against %s: %d problems, expected %d (first: %s \"%s\")", doc, schema, n,
                 i, n ? f.path[0] : "-", n ? f.rule[0] : "-");
}

#define VALID(schema, doc) expect((schema), (doc), NULL)

/* sg_schema_check refuses schema with exactly message. */
static void refused(const char *schema_text, const char *message)
{
    sg_json_t *schema = j(schema_text);
    sg_err_t err;

    sg_err_clear(&err);
    cr_assert_eq(sg_schema_check(schema, "$.tools.reserve.args", &err), -1, "%s accepted",
                 schema_text);
    cr_expect_str_eq(err.code, "config.schema.invalid");
    cr_expect_eq(err.cls, SG_ERRCLASS_PERMANENT);
    cr_expect_not(err.retriable);
    cr_expect_str_eq(err.message, message, "schema %s", schema_text);
    sg_json_destroy(schema);
}

/* sg_schema_check refuses schema with a message starting with prefix. */
static void refused_prefix(const char *schema_text, const char *prefix)
{
    sg_json_t *schema = j(schema_text);
    sg_err_t err;

    cr_assert_eq(sg_schema_check(schema, "$.tools.reserve.args", &err), -1, "%s accepted",
                 schema_text);
    cr_expect_str_eq(err.code, "config.schema.invalid");
    cr_expect_eq(strncmp(err.message, prefix, strlen(prefix)), 0, "%s: got %s", schema_text,
                 err.message);
    cr_expect_gt(strlen(err.message), strlen(prefix), "the library's reason follows");
    sg_json_destroy(schema);
}

/* ---- validation, keyword by keyword ---- */

Test(schema, empty_schema_accepts_anything)
{
    static const char *const docs[] = {"{}", "[]", "'s'", "1.5", "true", "null", "{'a':[{}]}"};

    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        VALID("{}", docs[i]);
}

Test(schema, type_each_name)
{
    static const struct {
        const char *type, *ok, *bad, *bad_rule;
    } cases[] = {
        {"object", "{}", "[]", "type: expected object"},
        {"array", "[1]", "{}", "type: expected array"},
        {"string", "''", "1", "type: expected string"},
        {"number", "1.5", "'1.5'", "type: expected number"},
        {"integer", "-7", "7.25", "type: expected integer"},
        {"boolean", "false", "0", "type: expected boolean"},
        {"null", "null", "false", "type: expected null"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char schema[64];

        snprintf(schema, sizeof(schema), "{'type':'%s'}", cases[i].type);
        VALID(schema, cases[i].ok);
        expect(schema, cases[i].bad, "$.args", cases[i].bad_rule, NULL);
    }
}

Test(schema, integer_is_a_number_without_fraction)
{
    VALID("{'type':'integer'}", "1.0");
    VALID("{'type':'integer'}", "1e3");
    VALID("{'type':'integer'}", "-0");
    VALID("{'type':'number'}", "3");
    expect("{'type':'integer'}", "0.5", "$.args", "type: expected integer", NULL);
    expect("{'type':'integer'}", "'3'", "$.args", "type: expected integer", NULL);
}

Test(schema, type_list_accepts_any_and_names_all)
{
    const char *s = "{'type':['string','null']}";

    VALID(s, "'x'");
    VALID(s, "null");
    expect(s, "3", "$.args", "type: expected string or null", NULL);
    expect("{'type':['integer','boolean','array']}", "{}", "$.args",
           "type: expected integer or boolean or array", NULL);
}

Test(schema, properties_nest_and_paths_name_the_value)
{
    const char *s = "{'type':'object','properties':{'items':{'type':'array','items':"
                    "{'type':'object','properties':{'qty':{'type':'integer','minimum':1}}}}}}";

    VALID(s, "{'items':[{'qty':1},{'qty':5}]}");
    VALID(s, "{'other':'undeclared members are allowed by default'}");
    expect(s, "{'items':[{'qty':1},{'qty':0}]}", "$.args.items[1].qty", "minimum: 1", NULL);
    expect(s, "{'items':[{'qty':'2'}]}", "$.args.items[0].qty", "type: expected integer", NULL);
    expect(s, "{'items':{}}", "$.args.items", "type: expected array", NULL);
}

Test(schema, required)
{
    const char *s = "{'required':['sku','qty'],'properties':{'sku':{'type':'string'}}}";

    VALID(s, "{'sku':'A1','qty':2}");
    VALID(s, "{'sku':'A1','qty':null}");
    expect(s, "{'qty':2}", "$.args.sku", "required", NULL);
    expect(s, "{}", "$.args.sku", "required", "$.args.qty", "required", NULL);
    VALID(s, "[]"); /* required constrains objects only */
}

Test(schema, additional_properties)
{
    const char *closed = "{'properties':{'a':{},'b':{}},'additionalProperties':false}";

    VALID(closed, "{'a':1,'b':2}");
    VALID(closed, "{}");
    expect(closed, "{'a':1,'c':2,'d':{'e':3}}", "$.args.c", "additionalProperties: not allowed",
           "$.args.d", "additionalProperties: not allowed", NULL);
    VALID("{'properties':{'a':{}},'additionalProperties':true}", "{'z':1}");
    expect("{'additionalProperties':false}", "{'z':1}", "$.args.z",
           "additionalProperties: not allowed", NULL);
}

Test(schema, items_checks_every_item)
{
    const char *s = "{'type':'array','items':{'type':'string','maxLength':2}}";

    VALID(s, "[]");
    VALID(s, "['ab','c']");
    expect(s, "['ab',3,'abc']", "$.args[1]", "type: expected string", "$.args[2]", "maxLength: 2",
           NULL);
}

Test(schema, min_and_max_items)
{
    const char *s = "{'minItems':1,'maxItems':3}";

    VALID(s, "[1]");
    VALID(s, "[1,2,3]");
    expect(s, "[]", "$.args", "minItems: 1", NULL);
    expect(s, "[1,2,3,4]", "$.args", "maxItems: 3", NULL);
    VALID(s, "'strings are not arrays'");
}

Test(schema, enum_compares_by_value)
{
    const char *s = "{'enum':['red',2,null,true,[1,'x'],{'k':1,'m':[]}]}";

    VALID(s, "'red'");
    VALID(s, "2.0");
    VALID(s, "null");
    VALID(s, "true");
    VALID(s, "[1,'x']");
    VALID(s, "{'m':[],'k':1}");
    expect(s, "'Red'", "$.args", "enum", NULL);
    expect(s, "'2'", "$.args", "enum", NULL);
    expect(s, "false", "$.args", "enum", NULL);
    expect(s, "['x',1]", "$.args", "enum", NULL);
    expect(s, "{'k':1}", "$.args", "enum", NULL);
}

Test(schema, const_compares_by_value)
{
    VALID("{'const':{'v':1}}", "{'v':1.0}");
    VALID("{'const':null}", "null");
    expect("{'const':{'v':1}}", "{'v':1,'w':2}", "$.args", "const", NULL);
    expect("{'const':'x'}", "'y'", "$.args", "const", NULL);
    expect("{'const':0}", "false", "$.args", "const", NULL);
}

Test(schema, minimum_and_maximum)
{
    const char *s = "{'minimum':1,'maximum':10.5}";

    VALID(s, "1");
    VALID(s, "10.5");
    expect(s, "0.999", "$.args", "minimum: 1", NULL);
    expect(s, "11", "$.args", "maximum: 10.5", NULL);
    VALID(s, "'0'"); /* bounds constrain numbers only */
}

Test(schema, exclusive_bounds)
{
    const char *s = "{'exclusiveMinimum':0,'exclusiveMaximum':0.5}";

    VALID(s, "0.25");
    expect(s, "0", "$.args", "exclusiveMinimum: 0", NULL);
    expect(s, "0.5", "$.args", "exclusiveMaximum: 0.5", NULL);
    expect(s, "-3", "$.args", "exclusiveMinimum: 0", NULL);
    expect("{'minimum':-1e+20}", "-1e21", "$.args", "minimum: -1e+20", NULL);
    expect("{'maximum':0.1}", "0.2", "$.args", "maximum: 0.1", NULL);
}

Test(schema, lengths_count_code_points)
{
    const char *s = "{'minLength':2,'maxLength':3}";

    VALID(s, "'ab'");
    VALID(s, "'\xc3\xa9\xc3\xa9\xc3\xa9'");     /* 3 x U+00E9, 6 bytes */
    VALID(s, "'\xf0\x9f\x98\x80\xe2\x82\xac'"); /* U+1F600 U+20AC, 7 bytes */
    VALID(s, "'\\u00e9\\ud83d\\ude00'");        /* escapes count once decoded */
    expect(s, "'\xf0\x9f\x98\x80'", "$.args", "minLength: 2", NULL);
    expect(s, "'abcd'", "$.args", "maxLength: 3", NULL);
    expect(s, "'\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9'", "$.args", "maxLength: 3", NULL);
    expect("{'maxLength':0}", "'a'", "$.args", "maxLength: 0", NULL);
    VALID("{'maxLength':0}", "''");
}

Test(schema, pattern_is_unanchored_posix_ere)
{
    VALID("{'pattern':'b'}", "'abc'");
    expect("{'pattern':'b'}", "'ac'", "$.args", "pattern", NULL);
    VALID("{'pattern':'^[A-Z]{2}-[0-9]+$'}", "'AB-123'");
    expect("{'pattern':'^[A-Z]{2}-[0-9]+$'}", "'AB-123x'", "$.args", "pattern", NULL);
    VALID("{'pattern':'^(red|green)$'}", "'green'");
    VALID("{'pattern':'^[[:digit:]]+\\\\.[[:digit:]]$'}", "'12.5'");
    expect("{'pattern':'^[[:digit:]]+\\\\.[[:digit:]]$'}", "'1205'", "$.args", "pattern", NULL);
    VALID("{'pattern':'^a'}", "3"); /* pattern constrains strings only */
}

/* Compiled patterns are kept by text: a pattern seen again, one seen
 * among many others, and more distinct patterns than are kept (compiled
 * per match) must each still judge by their own text. */
Test(schema, many_patterns_each_judge_by_their_own_text)
{
    char schema[64], ok[32], bad[32];

    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 100; i++) {
            snprintf(schema, sizeof(schema), "{'pattern':'^p%d$'}", i);
            snprintf(ok, sizeof(ok), "'p%d'", i);
            snprintf(bad, sizeof(bad), "'p%d'", i + 1);
            VALID(schema, ok);
            expect(schema, bad, "$.args", "pattern", NULL);
        }
}

Test(schema, annotations_are_ignored)
{
    const char *s = "{'title':'T','description':'D','$comment':'C','default':5,"
                    "'properties':{'a':{'default':'not applied','description':'x'}}}";

    VALID(s, "{}");
    VALID(s, "'anything'");
}

/* ---- several problems, order and limit ---- */

Test(schema, every_problem_is_collected_in_order)
{
    const char *s = "{'type':'object','required':['sku','qty','mode'],"
                    "'additionalProperties':false,'properties':{"
                    "'sku':{'type':'string','pattern':'^[A-Z]+$','maxLength':4},"
                    "'qty':{'type':'integer','minimum':1},"
                    "'mode':{'enum':['fast','slow']},"
                    "'lines':{'type':'array','items':{'type':'object','required':['id'],"
                    "'properties':{'id':{'type':'string'}}}}}}";
    const char *doc = "{'sku':'abcde','qty':0.5,'lines':[{'id':'1'},{},{'id':2}],'x':null}";

    /* The object's own problem (mode missing) first, then its members in
     * document order, each with all of its problems. */
    expect(s, doc, "$.args.mode", "required", "$.args.sku", "maxLength: 4", "$.args.sku", "pattern",
           "$.args.qty", "type: expected integer", "$.args.qty", "minimum: 1", "$.args.lines[1].id",
           "required", "$.args.lines[2].id", "type: expected string", "$.args.x",
           "additionalProperties: not allowed", NULL);
}

Test(schema, stops_after_64_problems)
{
    char doc[1024] = "[";
    found_t f;

    for (int i = 0; i < 100; i++)
        strcat(doc, i ? ",1" : "1");
    strcat(doc, "]");
    cr_assert_eq(run("{'items':{'type':'string'}}", doc, &f), SG_SCHEMA_MAX_PROBLEMS);
    cr_assert_str_eq(f.path[63], "$.args[63]");
    cr_assert_str_eq(f.rule[63], "type: expected string");
}

Test(schema, no_callback_still_counts_and_base_defaults_to_root)
{
    sg_json_t *schema = j("{'properties':{'a':{'type':'string'}},'required':['b']}");
    sg_json_t *doc = j("{'a':1}");
    found_t f = {0};

    cr_assert_eq(sg_schema_validate(schema, doc, "$", NULL, NULL), 2);
    cr_assert_eq(sg_schema_validate(schema, doc, NULL, collect, &f), 2);
    cr_assert_str_eq(f.path[0], "$.b");
    cr_assert_str_eq(f.path[1], "$.a");
    sg_json_destroy(doc);
    sg_json_destroy(schema);
}

Test(schema, tool_args_example)
{
    const char *s = "{'type':'object','additionalProperties':false,'required':['order_id','lines'],"
                    "'properties':{'order_id':{'type':'string','pattern':'^ord-[0-9a-f]{8}$'},"
                    "'lines':{'type':'array','minItems':1,'maxItems':50,'items':{'type':'object',"
                    "'additionalProperties':false,'required':['sku','qty'],'properties':{"
                    "'sku':{'type':'string','minLength':1,'maxLength':64},"
                    "'qty':{'type':'integer','minimum':1,'maximum':1000}}}},"
                    "'priority':{'enum':['normal','express']},'note':{'type':['string','null']}}}";

    VALID(s, "{'order_id':'ord-0badcafe','lines':[{'sku':'A','qty':1000}],'note':null}");
    expect(s,
           "{'order_id':'ORD-1','lines':[{'sku':'','qty':1001,'colour':'red'}],"
           "'priority':'urgent'}",
           "$.args.order_id", "pattern", "$.args.lines[0].sku", "minLength: 1",
           "$.args.lines[0].qty", "maximum: 1000", "$.args.lines[0].colour",
           "additionalProperties: not allowed", "$.args.priority", "enum", NULL);
}

/* ---- sg_schema_check ---- */

Test(schema, check_accepts_every_keyword)
{
    sg_json_t *schema = j("{'type':['object','null'],'properties':{'a':{'type':'string',"
                          "'minLength':0,'maxLength':9,'pattern':'^x','enum':['x'],'const':'x'},"
                          "'n':{'minimum':-1.5,'maximum':2,'exclusiveMinimum':-2,"
                          "'exclusiveMaximum':3},'l':{'items':{},'minItems':0,'maxItems':0}},"
                          "'required':['a'],'additionalProperties':false,'description':'d',"
                          "'title':'t','default':{},'$comment':'c'}");
    sg_err_t err;

    sg_err_clear(&err);
    cr_assert_eq(sg_schema_check(schema, "$.x", &err), 0, "%s", err.message);
    cr_assert_str_eq(err.code, "");
    sg_json_destroy(schema);
}

Test(schema, unsupported_keyword_is_refused_with_its_path)
{
    refused("{'properties':{'qty':{'type':'integer','format':'int32'}}}",
            "$.tools.reserve.args.properties.qty.format: unsupported keyword");
    refused("{'$ref':'#/defs/x'}", "$.tools.reserve.args.$ref: unsupported keyword");
    refused("{'items':{'oneOf':[]}}", "$.tools.reserve.args.items.oneOf: unsupported keyword");
    refused("{'Type':'string'}", "$.tools.reserve.args.Type: unsupported keyword");
}

Test(schema, malformed_keywords_are_refused)
{
    static const struct {
        const char *schema, *message;
    } cases[] = {
        {"[]", "$.tools.reserve.args: must be a schema object, got array"},
        {"true", "$.tools.reserve.args: must be a schema object, got boolean"},
        {"{'type':'int'}", "$.tools.reserve.args.type: unknown type \"int\""},
        {"{'type':['string',1]}", "$.tools.reserve.args.type[1]: must be a string, got number"},
        {"{'type':['string','null','string']}",
         "$.tools.reserve.args.type[2]: duplicate type \"string\""},
        {"{'type':[]}", "$.tools.reserve.args.type: empty array"},
        {"{'type':{}}",
         "$.tools.reserve.args.type: must be a type name or an array of them, got object"},
        {"{'properties':[]}", "$.tools.reserve.args.properties: must be an object, got array"},
        {"{'properties':{'a':1}}",
         "$.tools.reserve.args.properties.a: must be a schema object, got number"},
        {"{'required':'a'}",
         "$.tools.reserve.args.required: must be an array of names, got string"},
        {"{'required':['a',2]}", "$.tools.reserve.args.required[1]: must be a string, got number"},
        {"{'required':['a','a']}", "$.tools.reserve.args.required[1]: duplicate name \"a\""},
        {"{'additionalProperties':{}}",
         "$.tools.reserve.args.additionalProperties: must be a boolean, got object"},
        {"{'items':[{}]}", "$.tools.reserve.args.items: must be a schema object, got array"},
        {"{'minItems':-1}", "$.tools.reserve.args.minItems: must be a non-negative integer"},
        {"{'maxItems':1.5}", "$.tools.reserve.args.maxItems: must be a non-negative integer"},
        {"{'minLength':'1'}", "$.tools.reserve.args.minLength: must be a non-negative integer"},
        {"{'maxLength':1e300}", "$.tools.reserve.args.maxLength: must be a non-negative integer"},
        {"{'enum':[]}", "$.tools.reserve.args.enum: must be a non-empty array"},
        {"{'enum':'a'}", "$.tools.reserve.args.enum: must be a non-empty array"},
        {"{'minimum':'1'}", "$.tools.reserve.args.minimum: must be a number, got string"},
        {"{'exclusiveMinimum':true}",
         "$.tools.reserve.args.exclusiveMinimum: must be a number, got boolean"},
        {"{'description':1}", "$.tools.reserve.args.description: must be a string, got number"},
        {"{'pattern':1}", "$.tools.reserve.args.pattern: must be a string, got number"},
        {"{'minimum':2,'maximum':1}", "$.tools.reserve.args.minimum: greater than maximum"},
        {"{'minLength':5,'maxLength':4}", "$.tools.reserve.args.minLength: greater than maxLength"},
        {"{'minItems':1,'maxItems':0}", "$.tools.reserve.args.minItems: greater than maxItems"},
        {"{'properties':{'sku':{}},'required':['sku','qty'],'additionalProperties':false}",
         "$.tools.reserve.args.required[1]: \"qty\" is not in properties and "
         "additionalProperties is false"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        refused(cases[i].schema, cases[i].message);
}

Test(schema, bad_regex_is_refused)
{
    /* The rest of the message is the C library's regerror() text. */
    refused_prefix("{'properties':{'sku':{'pattern':'^[A-Z'}}}",
                   "$.tools.reserve.args.properties.sku.pattern: invalid regular expression: ");
    refused_prefix("{'pattern':'(a'}",
                   "$.tools.reserve.args.pattern: invalid regular expression: ");
    refused_prefix("{'pattern':'a{2,1}'}",
                   "$.tools.reserve.args.pattern: invalid regular expression: ");
}

/* glibc takes \d for a plain "d": "^\d+$" would accept "ddd" and refuse
 * "123", so the escape is refused rather than silently misread. */
Test(schema, perl_escapes_and_non_ascii_patterns_are_refused)
{
    refused("{'pattern':'^\\\\d+$'}",
            "$.tools.reserve.args.pattern: \\d is not POSIX ERE (write [0-9], [[:space:]], ...)");
    refused("{'pattern':'\\\\w'}",
            "$.tools.reserve.args.pattern: \\w is not POSIX ERE (write [0-9], [[:space:]], ...)");
    refused("{'pattern':'(a)\\\\1'}",
            "$.tools.reserve.args.pattern: \\1 is not POSIX ERE (write [0-9], [[:space:]], ...)");
    refused("{'pattern':'^caf\xc3\xa9$'}",
            "$.tools.reserve.args.pattern: non-ASCII characters are not supported");
    /* An escaped backslash followed by a letter is a literal backslash. */
    VALID("{'pattern':'^a\\\\\\\\d$'}", "'a\\\\d'");
    VALID("{'pattern':'^\\\\$[0-9]+\\\\.[0-9]{2}$'}", "'$12.50'");
}

/* glibc's regcomp copies a repeated part once per repetition: the fuzzer
 * found a 151-byte pattern ("a+++...") that took over 2 GB.  Patterns that
 * could are refused at load; ordinary ones still pass. */
Test(schema, patterns_that_could_blow_up_regcomp_are_refused)
{
    refused("{'pattern':'^a++$'}", "$.tools.reserve.args.pattern: a quantifier right after "
                                   "another (as in a++ or a{2}*) is not POSIX ERE");
    refused("{'pattern':'(ab){2}*'}", "$.tools.reserve.args.pattern: a quantifier right after "
                                      "another (as in a++ or a{2}*) is not POSIX ERE");
    refused("{'pattern':'a{1000}'}", "$.tools.reserve.args.pattern: a bound above {100}");
    refused("{'pattern':'a{1,1000}'}", "$.tools.reserve.args.pattern: a bound above {100}");
    refused("{'pattern':'(a{9}){9}b{9}'}",
            "$.tools.reserve.args.pattern: more than 2 bounds {n,m}");
    VALID("{'pattern':'^[A-Z]{2}-[0-9]{3,}$'}", "'AB-1234'");
    VALID("{'pattern':'^a\\\\+\\\\+$'}", "'a++'");
    {
        char long_pattern[300];
        memset(long_pattern, 'a', 257);
        long_pattern[257] = '\0';
        char schema[400];
        snprintf(schema, sizeof(schema), "{'pattern':'%s'}", long_pattern);
        refused(schema, "$.tools.reserve.args.pattern: longer than 256 characters");
    }
}

/* Level n of a schema nested through items, n levels in all. */
static char *nested_schema(int levels)
{
    char *buf = malloc((size_t)levels * 12 + 1);

    cr_assert_not_null(buf);
    buf[0] = '\0';
    for (int i = 1; i < levels; i++)
        strcat(buf, "{'items':");
    strcat(buf, "{");
    for (int i = 0; i < levels; i++)
        strcat(buf, "}");
    return buf;
}

Test(schema, deeper_than_32_levels_is_refused)
{
    char *text = nested_schema(SG_SCHEMA_MAX_DEPTH), want[512];
    sg_json_t *schema = j(text);
    sg_err_t err;

    cr_assert_eq(sg_schema_check(schema, "$", &err), 0, "32 levels: %s", err.message);
    sg_json_destroy(schema);
    free(text);

    text = nested_schema(SG_SCHEMA_MAX_DEPTH + 1);
    schema = j(text);
    cr_assert_eq(sg_schema_check(schema, "$", &err), -1);
    cr_assert_str_eq(err.code, "config.schema.invalid");
    strcpy(want, "$");
    for (int i = 0; i < SG_SCHEMA_MAX_DEPTH; i++)
        strcat(want, ".items");
    strcat(want, ": nested deeper than 32 levels");
    cr_assert_str_eq(err.message, want);
    sg_json_destroy(schema);
    free(text);

    /* Levels through properties count the same: root, a, b, then 30 items
     * make 33. */
    text = malloc(1024);
    cr_assert_not_null(text);
    strcpy(text, "{'properties':{'a':{'properties':{'b':");
    strcpy(want, "$.tools.reserve.args.properties.a.properties.b");
    for (int i = 0; i < 30; i++) {
        strcat(text, "{'items':");
        strcat(want, ".items");
    }
    strcat(text, "{}");
    for (int i = 0; i < 30 + 4; i++)
        strcat(text, "}");
    strcat(want, ": nested deeper than 32 levels");
    refused(text, want);
    free(text);
}

Test(schema, check_defaults_and_null_err)
{
    sg_json_t *schema = j("{'nope':1}");
    sg_err_t err;

    cr_assert_eq(sg_schema_check(schema, NULL, &err), -1);
    cr_assert_str_eq(err.message, "$.nope: unsupported keyword");
    cr_assert_eq(sg_schema_check(schema, "$", NULL), -1, "NULL err is allowed");
    sg_json_destroy(schema);
}
