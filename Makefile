# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: venv kcat zookeeper netns-tools nemesis test soak run cluster demo bench lint clean conformance conformance-secure

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py src/strata/spark/_recordwalk.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

# kcat for tests/broker/test_kcat.py: installed with apt only as root or with passwordless sudo;
# never fails the build (the kcat tests skip when the binary is absent).
kcat:
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else echo "kcat not installed (needs root or passwordless sudo)"; exit 0; fi; \
	  { command -v apt-get >/dev/null 2>&1 && $$SUDO apt-get update -qq && \
	    $$SUDO apt-get install -y -qq kcat >/dev/null; } || echo "kcat not installed"; }

# ZooKeeper for the cluster tests (Debian's package; started by the tests as a child process, never
# as a service). Like kcat, installed with apt only as root or with passwordless sudo.
zookeeper:
	@test -f /usr/share/java/zookeeper.jar || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else echo "zookeeper not installed (needs root or passwordless sudo): apt-get install zookeeper"; exit 0; fi; \
	  { command -v apt-get >/dev/null 2>&1 && $$SUDO apt-get update -qq && \
	    $$SUDO apt-get install -y -qq --no-install-recommends zookeeper libslf4j-java >/dev/null; } || \
	    echo "zookeeper not installed"; }

# iproute2 (ip netns, tc) and nftables (random packet loss) for the network-fault tests (tests/nemesis,
# `make nemesis`); like kcat, installed with apt only as root or with passwordless sudo, else those tests skip.
netns-tools:
	@{ command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	  else echo "iproute2/nftables not installed (needs root or passwordless sudo)"; exit 0; fi; \
	  { command -v apt-get >/dev/null 2>&1 && $$SUDO apt-get update -qq && \
	    $$SUDO apt-get install -y -qq --no-install-recommends iproute2 nftables >/dev/null; } || \
	    echo "iproute2/nftables not installed"; }

# Two workers (pytest-xdist): most tests wait on brokers, ZooKeeper or Spark rather than use a core.
TEST_WORKERS ?= 2
test: venv kcat zookeeper netns-tools
	$(PY) -m pytest -m "not slow" -q --durations=25 -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The Jepsen-style nemesis (issue 26; root only: network namespaces): NEMESIS_ARGS, e.g. --seed 7 to replay a
# run; the default is 4 runs of 25 fault windows of 12 s, 8 s apart (100 windows, about 40 minutes).
# Output: nemesis-out/seed-*/
NEMESIS_ARGS ?= --runs 4 --windows 25 --fault-s 12 --quiet-s 8
nemesis: venv zookeeper netns-tools
	$(PY) -m nemesis.run --out nemesis-out $(NEMESIS_ARGS)

soak: venv zookeeper
	$(PY) -m pytest -m slow -q $(PYTEST_ARGS)

# librdkafka's own test suite against a 3-broker Strata cluster (conformance/run.py; about 45 min on 2 cores,
# never part of `make test`). LIBRDKAFKA_SRC: a librdkafka source tree or .tar.gz (README: Client conformance);
# built under $(CONFORMANCE_DIR) with Debian's build deps, installed like kcat only as root or with sudo.
CONFORMANCE_DIR ?= .conformance
CONFORMANCE_DEBS := build-essential pkg-config libssl-dev zlib1g-dev libzstd-dev liblz4-dev libsasl2-dev \
	libcurl4-openssl-dev rapidjson-dev
conformance: venv zookeeper
	@command -v dpkg >/dev/null 2>&1 || exit 0; \
	missing=$$(for p in $(CONFORMANCE_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	test -z "$$missing" && exit 0; \
	if [ "$$(id -u)" = 0 ]; then SUDO=""; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; \
	else echo "missing build deps (needs root or passwordless sudo): apt-get install" $$missing; exit 0; fi; \
	{ $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } || \
	  echo "could not install:" $$missing
	$(PY) conformance/run.py --src "$(LIBRDKAFKA_SRC)" --work-dir "$(CONFORMANCE_DIR)" $(CONFORMANCE_ARGS)

# The same against a secured cluster as trivup sets one up (SSL and SASL listeners, PLAIN and SCRAM users, the
# ACL authorizer): the security tests and a few ordinary ones, with security.protocol SSL, SASL_PLAINTEXT
# (SCRAM-SHA-512) and SASL_SSL (PLAIN); about 6 min. CONFORMANCE_SECURITY picks some: ssl,sasl_ssl:SCRAM-SHA-256
CONFORMANCE_SECURITY ?= all
conformance-secure: venv zookeeper
	$(PY) conformance/run.py --src "$(LIBRDKAFKA_SRC)" --work-dir "$(CONFORMANCE_DIR)" --security "$(CONFORMANCE_SECURITY)" $(CONFORMANCE_ARGS)

run: venv
	$(PY) -m strata serve --config config/server.properties

# A local cluster: ZooKeeper and three brokers on 127.0.0.1:9092-9094 (metrics 9404-9406), data and logs
# under $(CLUSTER_DIR); prints the bootstrap string, Ctrl-C stops them all. CLUSTER_ARGS: see --help.
CLUSTER_DIR ?= cluster-data
cluster: venv zookeeper
	@$(PY) -m strata.tools.local_cluster --dir "$(CLUSTER_DIR)" $(CLUSTER_ARGS)

# The pipeline end to end: a broker on the embedded defaults, 1M events tiered, a PySpark job over both tiers.
demo: venv
	$(PY) examples/pipeline.py $(DEMO_ARGS)

bench: venv
	$(PY) bench/run.py $(BENCH_ARGS)

lint: venv
	$(VENV)/bin/ruff check src tests bench nemesis
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build src/*.egg-info
