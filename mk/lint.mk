# The lint gate, run first by `make test` (TEST_DEPS) and alone by `make lint`:
#   ruff   the rules pyproject.toml selects, over every tracked Python file;
#   mypy   core and the service-boundary clients (pyproject.toml [tool.mypy] files);
#   lint-imports   the import contracts between the services (pyproject.toml [tool.importlinter]);
#   tests/core/test_envs.py   every VERI_* variable read anywhere is declared in core/envs.py;
#   tests/docs                the docs: generated references match the code, the site builds --strict (links,
#                             anchors, nav), the README and the commands' help are for the user, make help
#                             lists every public target.
TEST_DEPS += lint

.PHONY: lint

lint: venv ## ruff + mypy + import contracts (pyproject.toml) + the VERI_* declaration check + the docs' checks (make test runs it)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pytest -q -p no:cacheprovider tests/core/test_envs.py tests/docs
