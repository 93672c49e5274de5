"""A maintainers' tool that reads the inference engines' own source (their published wheels) and
holds the collection's rule packs and simulator to it. Not part of the built collection (galaxy.yml
build_ignore), not run by the tests: see README.md, "For maintainers", and docs/engine-source.md.
"""
