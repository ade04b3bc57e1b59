# Sluice — see README.md. Every target works on a fresh machine with Go 1.26
# and Node.js/npm (the web console's build and tests, the npm client test).

GO        ?= go
BIN       := bin/sluice
# The module's packages; npm packages may ship Go files (flatted does) that
# are not ours to vet or test.
PKGS      := $(shell $(GO) list ./... 2>/dev/null | grep -v /node_modules/)
TESTFLAGS ?= -race -count=1 -timeout 20m
# `sluice version` prints it.
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: all build console run test test-go test-console test-node-deps screenshots bench lint fmt generate clean

all: build

# The web console (webui/), built into webui/dist/console/ and embedded in
# the binary by webui/embed.go. Rebuilt when a source, the lock file or the
# API document changed; `go build` without it gives a binary whose console
# page says it was not built.
CONSOLE_SRC := $(shell find webui/src webui/public -type f 2>/dev/null) webui/index.html webui/vite.config.ts \
	webui/tsconfig.json webui/package.json platform/api/openapi.yaml
CONSOLE     := webui/dist/console/index.html

build: $(CONSOLE)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/sluice

console: $(CONSOLE)

$(CONSOLE): webui/node_modules/.package-lock.json $(CONSOLE_SRC)
	cd webui && npm run --silent build

webui/node_modules/.package-lock.json: webui/package-lock.json
	cd webui && npm ci --no-audit --no-fund --loglevel=error

# Runs `sluice serve` (the platform, its console and a gateway in one
# process, data in ./sluice-data) with `sluice mock-llm` on 127.0.0.1:9000 as
# an upstream to point a provider at. The admin token is kept in
# sluice-data/admin-token (owner-only) so that it can be shown at every
# start; set SLUICE_ADMIN_TOKEN to use your own.
run: build
	@mkdir -p sluice-data && chmod 700 sluice-data
	@test -n "$$SLUICE_ADMIN_TOKEN" || test -s sluice-data/admin-token || \
		(umask 077; printf 'sluice-admin-%s\n' "$$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')" > sluice-data/admin-token)
	@tok="$${SLUICE_ADMIN_TOKEN:-$$(cat sluice-data/admin-token)}"; \
	echo; echo "  console:     http://127.0.0.1:8081/"; echo "  admin token: $$tok"; \
	echo "  gateway:     http://127.0.0.1:8080/<provider>/v1/...   mock upstream: http://127.0.0.1:9000"; echo; \
	$(BIN) mock-llm --listen 127.0.0.1:9000 & mock=$$!; trap 'kill $$mock 2>/dev/null' EXIT INT TERM; \
	SLUICE_ADMIN_TOKEN="$$tok" $(BIN) serve

# The whole test suite: Go unit, end-to-end, Redis and Node client tests,
# then the console's lint (ESLint, tsc), unit tests (Vitest) and browser tests (playwright-core
# driving Debian's chromium against a real sluice serve and mock-llm).
test: test-node-deps build
	$(GO) vet $(PKGS)
	$(GO) test $(TESTFLAGS) $(PKGS)
	$(MAKE) test-console

test-console: build
	cd webui && npm run --silent lint
	cd webui && npm run --silent test
	cd webui && SLUICE_BIN=$(CURDIR)/$(BIN) npm run --silent test:browser

# The browser tests, saving each page at 1280 and 390 px to docs/screenshots/.
screenshots: build
	cd webui && SLUICE_BIN=$(CURDIR)/$(BIN) SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots npm run --silent test:browser

test-node-deps:
	cd e2e/node && npm ci --no-audit --no-fund --loglevel=error

bench: build
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	./bench/gateway-vs-proxy.sh

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)
	cd webui && npm run --silent lint

fmt:
	gofmt -w $$(git ls-files '*.go')

generate:
	$(GO) generate ./policydefs/... ./platform/api/... ./tokencount/...
	cd webui && npm run --silent generate

clean:
	rm -rf bin webui/dist/console
