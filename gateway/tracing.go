package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"sluice/llmapi"
	"sluice/meter"
	"sluice/policies"
)

// OpenTelemetry traces (docs/observability.md): with Options.Tracer set, a
// server span per proxied request and a client span per upstream attempt,
// with the GenAI semantic convention's attributes. Every value comes from
// the request's usage record (meter.Record) or, for what the record does
// not hold, from the parsed request: the span says what the record says.
// No prompt, completion, header or key is ever an attribute.

// Attribute keys (OpenTelemetry semantic conventions, GenAI and HTTP; the
// sluice.* keys are the gateway's own).
const (
	attrOperation      = attribute.Key("gen_ai.operation.name")
	attrProvider       = attribute.Key("gen_ai.provider.name")
	attrSystem         = attribute.Key("gen_ai.system")
	attrRequestModel   = attribute.Key("gen_ai.request.model")
	attrResponseModel  = attribute.Key("gen_ai.response.model")
	attrMaxTokens      = attribute.Key("gen_ai.request.max_tokens")
	attrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	attrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	attrHTTPStatus     = attribute.Key("http.response.status_code")
	attrHTTPMethod     = attribute.Key("http.request.method")
	attrErrorType      = attribute.Key("error.type")
	attrServerAddress  = attribute.Key("server.address")
	attrServerPort     = attribute.Key("server.port")
	attrRoute          = attribute.Key("sluice.route")
	attrProviderName   = attribute.Key("sluice.provider")
	attrApplication    = attribute.Key("sluice.application")
	attrKeyID          = attribute.Key("sluice.key_id")
	attrResolution     = attribute.Key("sluice.resolution")
	attrDeniedBy       = attribute.Key("sluice.denied_by")
	attrRequestID      = attribute.Key("sluice.request_id")
	attrCost           = attribute.Key("sluice.cost_micro_usd")
	attrAttempts       = attribute.Key("sluice.attempts")
	attrAttempt        = attribute.Key("sluice.attempt")
	attrCachedTokens   = attribute.Key("gen_ai.usage.cache_read.input_tokens")
	attrUsageSource    = attribute.Key("sluice.usage_source")
	attrCostPriceTable = attribute.Key("sluice.price_version")
)

// propagator reads and writes W3C traceparent / tracestate headers.
var propagator propagation.TraceContext

// operationName is the GenAI operation of an endpoint.
func operationName(ep llmapi.Endpoint) string {
	switch ep {
	case llmapi.Embeddings:
		return "embeddings"
	case llmapi.Completions:
		return "text_completion"
	}
	return "chat"
}

// providerName is the GenAI provider name of a provider type.
func providerName(typ string) string {
	if typ == "anthropic" {
		return "anthropic"
	}
	return "openai"
}

// spanName is "{operation} {model}" (the GenAI convention), the operation
// alone without a model.
func spanName(ep llmapi.Endpoint, model string) string {
	if model == "" {
		return operationName(ep)
	}
	return operationName(ep) + " " + model
}

// startSpan starts the request's server span, a child of the client's
// traceparent when it sent one, and puts it in x.r's context (the upstream
// attempts' parent). A no-op without a tracer.
func (x *exchange) startSpan() {
	t := x.g.opts.Tracer
	if t == nil {
		return
	}
	ctx := propagator.Extract(x.r.Context(), propagation.HeaderCarrier(x.r.Header))
	ctx, x.span = t.Start(ctx, "gateway", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrHTTPMethod.String(x.r.Method)))
	x.r = x.r.WithContext(ctx)
}

// endSpan ends the server span with rec's facts (nil: the request reached
// no LLM endpoint; only its status is known).
func (x *exchange) endSpan(rec *meter.Record) {
	s := x.span
	if s == nil {
		return
	}
	x.span = nil
	if rec == nil {
		if x.status > 0 {
			s.SetAttributes(attrHTTPStatus.Int(x.status))
		}
		s.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 24)
	str := func(k attribute.Key, v string) {
		if v != "" {
			attrs = append(attrs, k.String(v))
		}
	}
	num := func(k attribute.Key, v int64) {
		if v != 0 {
			attrs = append(attrs, k.Int64(v))
		}
	}
	prov := providerName(x.rt.provider.typ)
	attrs = append(attrs, attrOperation.String(operationName(x.ep)), attrProvider.String(prov), attrSystem.String(prov))
	str(attrRequestModel, rec.RequestedModel)
	str(attrResponseModel, rec.ServedModel)
	if x.call != nil && x.call.Request.LLM != nil {
		num(attrMaxTokens, x.call.Request.LLM.MaxTokens)
	}
	if rec.UsageSource != meter.UsageNone {
		attrs = append(attrs, attrInputTokens.Int64(rec.PromptTokens), attrOutputTokens.Int64(rec.CompletionTokens),
			attrUsageSource.String(rec.UsageSource.String()))
		num(attrCachedTokens, rec.CachedTokens)
	}
	if rec.Status > 0 {
		attrs = append(attrs, attrHTTPStatus.Int(rec.Status))
	}
	str(attrRoute, rec.Route)
	str(attrProviderName, rec.Provider)
	str(attrApplication, rec.Application)
	str(attrKeyID, rec.KeyID)
	attrs = append(attrs, attrResolution.String(rec.Resolution.String()), attrRequestID.String(rec.ID))
	str(attrDeniedBy, rec.DeniedBy)
	num(attrCost, rec.CostMicroUSD)
	str(attrCostPriceTable, rec.PriceVersion)
	num(attrAttempts, int64(rec.Attempts))
	str(attrErrorType, rec.ErrorCode)
	s.SetName(spanName(x.ep, rec.RequestedModel))
	s.SetAttributes(attrs...)
	switch rec.Resolution {
	case meter.UpstreamError, meter.InternalError:
		s.SetStatus(codes.Error, rec.Resolution.String())
	}
	s.End()
}

// attemptSpan starts the client span of upstream attempt n (1-based) to
// target u of p and writes its traceparent into header. It returns ctx
// unchanged and a nil span without a tracer.
func (g *Gateway) attemptSpan(ctx context.Context, p *provider, call *policies.Call, n int, req *http.Request) (context.Context, trace.Span) {
	t := g.opts.Tracer
	if t == nil {
		return ctx, nil
	}
	var model string
	var ep llmapi.Endpoint
	if call.Request.LLM != nil {
		model = call.Request.LLM.Model
	}
	ep = llmapi.Endpoint(call.Shared.Endpoint)
	prov := providerName(p.typ)
	attrs := []attribute.KeyValue{
		attrOperation.String(operationName(ep)), attrProvider.String(prov), attrSystem.String(prov),
		attrServerAddress.String(req.URL.Hostname()), attrAttempt.Int(n), attrProviderName.String(p.name),
		attrHTTPMethod.String(req.Method),
	}
	if model != "" {
		attrs = append(attrs, attrRequestModel.String(model))
	}
	if port := req.URL.Port(); port != "" {
		if v, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, attrServerPort.Int(v))
		}
	}
	ctx, span := t.Start(ctx, spanName(ep, model), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
	return ctx, span
}

// endAttemptSpan ends an attempt's client span with its answer's status or
// its error (span nil: no-op).
func endAttemptSpan(span trace.Span, status int, err error) {
	if span == nil {
		return
	}
	if status > 0 {
		span.SetAttributes(attrHTTPStatus.Int(status))
		if status >= 500 {
			span.SetAttributes(attrErrorType.String(strconv.Itoa(status)))
			span.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
		}
	}
	if err != nil {
		span.SetAttributes(attrErrorType.String(errorType(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// errorType is the error.type of a failed attempt.
func errorType(err error) string {
	switch {
	case errors.Is(err, errAttemptTimeout):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "connect"
}
