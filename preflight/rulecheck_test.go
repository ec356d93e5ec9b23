package preflight

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infera/infera-exec/internal/workerargs"
	"github.com/infera/infera-exec/preflight/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configFacts is the facts of a vLLM start on a model directory holding
// config.json.
func configFacts(t *testing.T, config string) *Facts {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("x"), 0o644))
	return &Facts{Args: workerargs.Parse([]string{"vllm", "serve", dir}), Env: map[string]string{}}
}

// config:FIELD takes a dotted path into config.json's objects; a path
// the top level lacks is looked up under text_config (multimodal models
// nest the language model's fields there).
func TestConfigDottedPath(t *testing.T) {
	f := configFacts(t, `{"model_type": "deepseek_v3",
		"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}}`)
	for fact, want := range map[string]rules.Value{
		"config:quantization_config.quant_method":      {Values: []string{"fp8"}, Read: "config.json quantization_config.quant_method=fp8"},
		"config:quantization_config.weight_block_size": {Values: []string{"128", "128"}, Read: "config.json quantization_config.weight_block_size=128,128"},
		"config:quantization_config.bits":              {Read: "config.json quantization_config.bits not given"},
		"config:model_type.quant_method":               {Read: "config.json model_type.quant_method not given"},
	} {
		assert.Equal(t, want, f.fact(fact), fact)
	}

	f = configFacts(t, `{"model_type": "kimi_k3", "architectures": ["KimiK3ForConditionalGeneration"],
		"text_config": {"model_type": "kimi_linear", "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {"num_bits": 4}}}}}}`)
	for fact, want := range map[string][]string{
		"config:quantization_config.quant_method":                           {"compressed-tensors"},
		"config:quantization_config.config_groups.group_0.weights.num_bits": {"4"},
		"config:model_type":             {"kimi_k3"}, // the top level's, when it has one
		"config:text_config.model_type": {"kimi_linear"},
		"config:text_config.quantization_config.config_groups.group_0.weights.x": nil,
	} {
		assert.Equal(t, want, f.fact(fact).Values, fact)
	}

	// A rule on the nested field fires, and does not for another method.
	r := &rules.Rule{ID: "fp8-block", Severity: rules.Warn, Message: "m", Fix: "f",
		When: []rules.Cond{{Fact: "config:quantization_config.quant_method", In: []string{"compressed-tensors"}}}}
	assert.Equal(t, rules.Holds, r.Eval("vllm", "", f.fact).Outcome)
	r.When[0].In = []string{"fp8"}
	assert.Equal(t, rules.DoesNot, r.Eval("vllm", "", f.fact).Outcome)
}

// vLLM's registry as its files write it: entries in several dicts,
// indented, some split over lines, comments and other assignments around.
func TestRegistryNames(t *testing.T) {
	src := `_TEXT_GENERATION_MODELS = {
    # [Decoder-only]
    "AquilaModel": ("llama", "LlamaForCausalLM"),
    "LlamaForCausalLM":("llama", "LlamaForCausalLM"),
	"Qwen3NextForCausalLM" : ("qwen3_next", "Qwen3NextForCausalLM"),
    "DeepseekV3ForCausalLM": (
        "deepseek_v2", "DeepseekV3ForCausalLM"),
    "_Private": ("x", "Y"),
    "not an ident": ("x", "Y"),
    "9Lives": ("x", "Y"),
    "Key": "value",
}
x = "LlamaModel"  # "Fake": (
    "Bad"
`
	assert.Equal(t, []string{"AquilaModel", "LlamaForCausalLM", "Qwen3NextForCausalLM", "DeepseekV3ForCausalLM", "_Private"}, registryNames([]byte(src)))
}

// config.json that gives no object says why: valid JSON nested deeper
// than the decoder reads is named so, not called "not a JSON object".
func TestConfigThatGivesNoObjectSaysWhy(t *testing.T) {
	deep := `{"model_type": "x", "a": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "}"
	for config, want := range map[string]string{
		deep:                      "config.json nests deeper than the 10000 levels infera-exec reads",
		`["not", "an", "object"]`: "config.json is not a JSON object (json: cannot unmarshal array",
		`{"model_type": "x",`:     "config.json is not valid JSON (unexpected end of JSON input)",
		`null`:                    "config.json is not a JSON object",
		`{"a": ` + strings.Repeat("[", 9990) + strings.Repeat("]", 9990) + `, "model_type": "deep_ok"}`: "",
	} {
		v := configFacts(t, config).fact("config:model_type")
		if want == "" {
			assert.Equal(t, []string{"deep_ok"}, v.Values)
			continue
		}
		assert.True(t, v.Unknown, "%.40s", config)
		assert.Contains(t, v.Why, want, "%.40s", config)
		if config != deep {
			assert.NotContains(t, v.Why, "deeper")
		}
	}
}
