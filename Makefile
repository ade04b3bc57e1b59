# Sluice — see README.md. Every target works on a fresh machine with Go 1.26
# (and Node.js/npm for the npm client test).

GO        ?= go
BIN       := bin/sluice
PKGS      := ./...
TESTFLAGS ?= -race -count=1 -timeout 20m
# `sluice version` prints it.
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)

.PHONY: all build run test test-go test-node-deps bench lint fmt generate clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/sluice

# Runs a gateway with its embedded default deployment, against the built-in
# mock upstream (no provider key or cloud account needed). With OPENAI_API_KEY
# set it goes to api.openai.com instead, behind a key generated at start and
# printed once (the public demo key is then refused).
run: build
	$(BIN) gateway

# The whole test suite: Go unit, end-to-end, Redis and Node client tests.
test: test-node-deps
	$(GO) vet $(PKGS)
	$(GO) test $(TESTFLAGS) $(PKGS)

test-node-deps:
	cd e2e/node && npm ci --no-audit --no-fund --loglevel=error

bench: build
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)
	./bench/gateway-vs-proxy.sh

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

generate:
	$(GO) generate ./policydefs/... ./platform/api/...

clean:
	rm -rf bin
