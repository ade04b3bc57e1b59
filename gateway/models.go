package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"

	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
)

// modelsPath is the path, under a route's context, of the model list.
const modelsPath = "/v1/models"

// endpointModels labels model list requests in metrics and the SharedContext.
const endpointModels llmapi.Endpoint = "models"

// maxModelsBytes bounds the provider's model list held in memory.
const maxModelsBytes = 16 << 20

// models answers GET {context}/v1/models: the caller is identified by the
// chain's Identifiers (a bad key is 401, as for any request), the provider's
// GET /v1/models is fetched with the gateway's credential, and every model
// that a chain member implementing policies.ModelFilter does not allow the
// caller is removed from its data list. No request phase runs and nothing is
// charged. Upstream errors are answered as for proxied requests.
func (x *exchange) models(rest string) {
	g, r, rt := x.g, x.r, x.rt
	x.ep = endpointModels
	if r.Method != http.MethodGet {
		x.w.Header().Set("Allow", http.MethodGet)
		x.fail(gwerror.New(http.StatusMethodNotAllowed, gwerror.TypeInvalidRequest, gwerror.CodeInvalidRequest,
			r.Method+" is not allowed on "+modelsPath+"; use GET"))
		return
	}
	call := x.newCall(rest)
	call.Shared.Endpoint = string(endpointModels)
	if gerr := x.identify(call); gerr != nil {
		x.fail(gerr)
		return
	}
	x.call = call
	resp, err := g.forward(r.Context(), rt.provider, call, nil)
	if err != nil {
		x.forwardFailed(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		x.upstreamStatus(resp)
		return
	}
	buf := g.getBuf()
	defer g.putBuf(buf)
	if _, err := readBounded(buf, resp.Body, maxModelsBytes); err != nil {
		if r.Context().Err() == nil {
			x.fail(gwerror.New(http.StatusBadGateway, gwerror.TypeUpstream, gwerror.CodeUpstreamUnavailable,
				"the model list from "+rt.provider.name+" was cut short or too large"))
		}
		return
	}
	body := buf.Bytes()
	if filters := modelFilters(rt.chain); len(filters) > 0 {
		filtered, ok := filterModels(body, func(id string) bool {
			for _, f := range filters {
				if !f.AllowsModel(call, id) {
					return false
				}
			}
			return true
		})
		if !ok {
			// Unfiltered, the list could show models the caller may not use.
			x.fail(gwerror.New(http.StatusBadGateway, gwerror.TypeUpstream, gwerror.CodeUpstreamError,
				"the model list from "+rt.provider.name+" is not a list of {\"id\": ...} objects under \"data\""))
			return
		}
		body = filtered
	}
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.addClientHeaders()
	x.writeHeader(http.StatusOK)
	_, _ = x.w.Write(body)
}

// modelFilters lists ch's members that filter models, in chain order.
func modelFilters(ch *policies.Chain) []policies.ModelFilter {
	var out []policies.ModelFilter
	for _, e := range ch.Entries() {
		if f, ok := e.Policy.(policies.ModelFilter); ok {
			out = append(out, f)
		}
	}
	return out
}

// filterModels keeps the elements of body's "data" list whose "id" allow
// accepts; every other member of body is kept as is. OpenAI's list
// ({"object":"list","data":[...]}) and Anthropic's ({"data":[...],
// "has_more","first_id","last_id"}) both have that shape; Anthropic's
// first_id and last_id are set to the ids of the filtered page. ok is false
// when body does not have that shape.
func filterModels(body []byte, allow func(id string) bool) ([]byte, bool) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, false
	}
	var data []json.RawMessage
	if err := json.Unmarshal(doc["data"], &data); err != nil || data == nil {
		return nil, false
	}
	kept := make([]json.RawMessage, 0, len(data))
	var ids []string
	for _, m := range data {
		var model struct {
			ID *string `json:"id"`
		}
		if err := json.Unmarshal(m, &model); err != nil || model.ID == nil {
			return nil, false
		}
		if allow(*model.ID) {
			kept = append(kept, m)
			ids = append(ids, *model.ID)
		}
	}
	var err error
	if doc["data"], err = json.Marshal(kept); err != nil {
		return nil, false
	}
	for key, idx := range map[string]int{"first_id": 0, "last_id": len(ids) - 1} {
		if _, present := doc[key]; !present {
			continue
		}
		doc[key] = json.RawMessage("null")
		if len(ids) > 0 {
			doc[key], _ = json.Marshal(ids[idx])
		}
	}
	out, err := json.Marshal(doc)
	return out, err == nil
}
