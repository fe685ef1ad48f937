# The docs site (mkdocs.yml, MkDocs + Material from the test extras), built with no network:
#   make docs   docs/reference/ written afresh from the code (scripts/docs/reference.py), then the site
#               into build/site/ (--strict: a broken link or anchor, or a page missing from the nav, fails)
# make lint checks the same without writing (tests/docs: the references match the code, the site builds).
.PHONY: docs

docs: venv ## the docs site into build/site/ (offline; docs/reference/ regenerated from the code)
	$(BIN)/python -m scripts.docs.reference --write
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@echo "the docs site: build/site/index.html"
