"""The offloader's tools: cost models, benches and the GPU check (never run inside a case process)."""
