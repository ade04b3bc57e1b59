package app

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracingOptions turn on OpenTelemetry traces (docs/observability.md). The
// exporter is OTLP over HTTP; its endpoint, headers, timeout, compression
// and TLS come from the standard OTEL_EXPORTER_OTLP_* (and
// OTEL_EXPORTER_OTLP_TRACES_*) environment variables, the sampler from
// OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (default: parent-based,
// every trace), the resource from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, all read by the OpenTelemetry SDK.
type TracingOptions struct {
	// Enabled turns tracing on (off: no tracer, no cost on the request path).
	Enabled bool
	// ServiceName is service.name unless OTEL_SERVICE_NAME is set (default
	// sluice-gateway).
	ServiceName string
	// Version is service.version ("" leaves it out).
	Version string
}

// tracer builds the tracer the options ask for (nil when off) and registers
// the provider's shutdown (which exports the spans still queued) as owned.
func (g *Gateway) tracer(o TracingOptions) (trace.Tracer, error) {
	if !o.Enabled {
		return nil, nil
	}
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	name := o.ServiceName
	if name == "" {
		name = "sluice-gateway"
	}
	attrs := []resource.Option{resource.WithTelemetrySDK(), resource.WithAttributes(semconv.ServiceName(name))}
	if o.Version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(o.Version)))
	}
	// The environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) comes
	// last: it overrides the defaults.
	res, err := resource.New(ctx, append(attrs, resource.WithFromEnv())...)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// The batcher never blocks a request: a full queue drops spans.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	g.owned = append(g.owned, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		return tp.Shutdown(ctx)
	})
	return tp.Tracer("sluice/gateway"), nil
}
