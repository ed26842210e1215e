# brewstream: `make run` for the live demo, `make test` for the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BREW := $(VENV)/bin/brewstream
JARS := .cache/jars
MVN := mvn -q -B
PYTEST_ARGS ?=
BENCH_ARGS ?=
QUIX_VENV := .cache/bench/quix-venv
# Defined before the bench targets, whose prerequisites are expanded as they are read.
KSTREAMS_SRC := $(wildcard bench/kstreams/src/brewbench/*.java)
KSTREAMS_JAR := .cache/bench/brewbench-kstreams.jar

.PHONY: install run run-cluster test lint docs unit sandbox-up sandbox-down clean bench bench-quick events windows revenue prometheus

GATE_SRC := $(wildcard service/drink_count/jvm/brewstream/*.java service/spark/jvm/brewstream/*.java)
GATE_JAR := $(JARS)/spark/brewstream-order-gate.jar

install: $(VENV)/.installed $(JARS)/broker/.installed $(JARS)/spark/.installed $(GATE_JAR)
	@# Compiled modules, as a wheel's install leaves them, also where Python writes none
	@# itself (PYTHONDONTWRITEBYTECODE), so that no command compiles them as it starts.
	@# Only what changed since is compiled again; Python ignores a stale one.
	@$(VENV)/bin/python -m compileall -q service restorer topics sandbox > /dev/null

$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

$(JARS)/broker/.installed: jars/broker.pom.xml
	rm -rf $(JARS)/broker
	$(MVN) -f jars/broker.pom.xml dependency:copy-dependencies
	touch $@

$(JARS)/spark/.installed: jars/spark-kafka.pom.xml
	rm -rf $(JARS)/spark
	$(MVN) -f jars/spark-kafka.pom.xml dependency:copy-dependencies
	touch $@

# The order gate and its sums, Spark functions in Java, compiled against the pinned
# pyspark's own jars; the jar sits with the Kafka source's jars, which reach every
# executor through spark.jars.
$(GATE_JAR): $(GATE_SRC) $(VENV)/.installed $(JARS)/spark/.installed
	rm -rf $(JARS)/gate-classes
	javac --release 17 -d $(JARS)/gate-classes \
	  -cp "$$($(VENV)/bin/python -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')/jars/*" $(GATE_SRC)
	jar cf $@ -C $(JARS)/gate-classes .

# The live demo: broker, topics, a background order feed, then the daemon and its board.
run: install
	$(BREW) sandbox up
	$(BREW) topics create
	@mkdir -p .sandbox
	@trap 'kill $$feed 2>/dev/null' EXIT; \
	  $(BREW) seed-orders > .sandbox/seed-orders.log 2>&1 & feed=$$!; \
	  echo "feeding orders in the background (log: .sandbox/seed-orders.log); Ctrl+C stops both"; \
	  $(BREW) run

# The same demo on a local standalone Spark cluster (a master and two one-core workers on
# 127.0.0.1): parsing and counting run on the executors, which get brewstream's code from
# the driver and run the Python named by spark.pyspark.python.
run-cluster: install
	$(BREW) sandbox up
	$(BREW) topics create
	$(BREW) spark-cluster up
	@mkdir -p .sandbox
	@trap 'kill $$feed 2>/dev/null' EXIT; \
	  $(BREW) seed-orders > .sandbox/seed-orders.log 2>&1 & feed=$$!; \
	  echo "feeding orders in the background (log: .sandbox/seed-orders.log); Ctrl+C stops both"; \
	  $(BREW) run --master spark://127.0.0.1:7077 --conf spark.pyspark.python=$(abspath $(VENV))/bin/python \
	    --conf spark.executor.memory=512m

# Seed 01 side by side: `make events` in one terminal, `make windows` in another.
events: install
	$(BREW) sandbox up
	$(BREW) topics create
	$(BREW) events

windows: install
	$(BREW) sandbox up
	$(BREW) topics create
	$(BREW) windows

# The revenue join, live: a menu whose prices change every few seconds (some late, now and
# then a drink withdrawn) and the order feed in the background, then the pipeline's table.
revenue: install
	$(BREW) sandbox up
	$(BREW) topics create
	@mkdir -p .sandbox
	@trap 'kill $$menu $$feed 2>/dev/null' EXIT; \
	  $(BREW) seed-menu --start 1m --step 3s --rate 3s --burst 3 > .sandbox/seed-menu.log 2>&1 & menu=$$!; \
	  $(BREW) seed-orders > .sandbox/seed-orders.log 2>&1 & feed=$$!; \
	  echo "feeding a menu and orders in the background (logs: .sandbox/seed-menu.log, .sandbox/seed-orders.log); Ctrl+C stops all"; \
	  $(BREW) revenue --from latest

test: install $(VENV)/.bench-installed lint docs prometheus
	command -v chromium >/dev/null || { s=$$([ "$$(id -u)" -eq 0 ] || echo sudo); $$s apt-get update -q && $$s apt-get install -y -q chromium; }
	$(VENV)/bin/pytest $(PYTEST_ARGS)

unit: install prometheus
	$(VENV)/bin/pytest -m "not spark" tests/unit $(PYTEST_ARGS)

# promtool (the alert rules' unit tests) and a prometheus binary the suite starts itself on
# a free port; the package's own service is never used.
prometheus:
	command -v promtool >/dev/null && command -v prometheus >/dev/null || { s=$$([ "$$(id -u)" -eq 0 ] || echo sudo); $$s apt-get update -q && $$s apt-get install -y -q --no-install-recommends prometheus; }

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check service restorer topics sandbox tests bench tools
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The documentation site (mkdocs.yml, docs/) into .cache/site. Strict: a broken link or
# anchor, a page missing from the nav or an included file that is gone fails the build.
# The CLI reference is generated from the click commands; tests/unit/docs/test_docs.py checks it.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir .cache/site

# The benchmark (docs/benchmarks.md): its own sandbox broker, every scenario, every system
# (brewstream, Kafka Streams, Spark's own aggregation, Quix Streams, a plain consumer),
# tables on stdout, bench/results/latest.json, and latest.md with its plots beside it.
bench: install $(VENV)/.bench-installed $(QUIX_VENV)/.installed $(KSTREAMS_JAR)
	$(VENV)/bin/python -m bench $(BENCH_ARGS)

# A small version of everything: every system, every scenario, every count checked, one
# setting each instead of the sweeps; results in bench/results/quick.json and quick.md.
BENCH_QUICK_ARGS := --orders 30000 --reps 1 --changelog-records 100000 --changelog-keys 100 \
  --latency-seconds 10 --warmup-seconds 3 --probe-seconds 5 --triggers 250ms \
  --sustained-seconds 8 --sustained-fractions 0.3,0.6 --failover-kills 1 --peer-sustained-fractions 0.3,0.6 \
  --ours-caps none --ours-masters 'local[3]' --kstreams-threads 1 --spark-shuffle-partitions 4 \
  --windows-rate 500 --windows-seconds 40 --no-profile --output bench/results/quick.json
bench-quick: install $(VENV)/.bench-installed $(QUIX_VENV)/.installed $(KSTREAMS_JAR)
	$(VENV)/bin/python -m bench $(BENCH_QUICK_ARGS) $(BENCH_ARGS)

$(VENV)/.bench-installed: pyproject.toml $(VENV)/.installed
	$(VENV)/bin/pip install -q -e '.[dev,bench]'
	touch $@

# Kafka Streams, the benchmark's Java peer (bench/kstreams/): its newest release (the pom
# says which), fetched by Maven, and the application compiled against them.

$(JARS)/kstreams/.installed: bench/kstreams/pom.xml
	rm -rf $(JARS)/kstreams
	$(MVN) -f bench/kstreams/pom.xml dependency:copy-dependencies
	touch $@

$(KSTREAMS_JAR): $(KSTREAMS_SRC) $(JARS)/kstreams/.installed
	rm -rf .cache/bench/kstreams-classes
	javac --release 17 -d .cache/bench/kstreams-classes -cp "$(JARS)/kstreams/*" $(KSTREAMS_SRC)
	jar cf $@ -C .cache/bench/kstreams-classes .

# Quix Streams pins confluent-kafka below brewstream's own pin, so it gets a virtualenv of its own.
$(QUIX_VENV)/.installed: bench/quix/requirements.txt
	test -x $(QUIX_VENV)/bin/python || $(PYTHON) -m venv $(QUIX_VENV)
	$(QUIX_VENV)/bin/pip install -q --upgrade pip
	$(QUIX_VENV)/bin/pip install -q -r bench/quix/requirements.txt
	touch $@

sandbox-up: install
	$(BREW) sandbox up

sandbox-down:
	$(BREW) sandbox down

clean:
	-$(BREW) spark-cluster down
	-$(BREW) sandbox down
	rm -rf .sandbox state/drink-count state/checkpoints
