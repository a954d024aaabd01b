"""Does a built flash-attn fit a torch? Read from its ELF files (symbols, ABI, CUDA runtime,
architectures), tags and provenance, never by importing it; the report doctor shares."""
