"""The phase map of HF assisted generation (tests/integration/test_hf_assisted.py), kept apart
so that bench/hf_static_compile.py (`--assisted`) runs the same map where polars and pytest are
not installed (the GPU machine)."""

SPEC_MAP = """
[adapter]
name = "hf-assisted"
package = "transformers"

[[phase]]
name = "draft"
targets = ["transformers.generation.candidate_generator:AssistedCandidateGenerator.get_candidates"]
accept = { from = "arg:input_ids", value = "shape[-1]", kind = "delta" }

[[phase]]
name = "verify"
targets = ["transformers.models.llama.modeling_llama:LlamaForCausalLM.forward"]

# the length after the cycle: every cycle's tokens, the last of each generate() too
[[phase]]
name = "accept"
targets = ["transformers.generation.candidate_generator:AssistedCandidateGenerator.update_candidate_strategy"]
accept = { from = "arg:input_ids", value = "shape[-1]", kind = "delta", state = "after" }

[cycle]
starts_with = "draft"
"""
