"""Program sources: git, Flux artifacts and Program artifacts."""
