package codec

// CheckJSON reports whether body is exactly one JSON value (whitespace around
// it allowed) within lim's nesting depth and keys per object; the other limits
// do not apply. A violation is an *Error, with Limit set for a limit. The REST API runs it on bodies it then
// decodes into structs, whose free-form fields (RPC params, additionalInfo) the
// telemetry limits would not otherwise reach.
func CheckJSON(body []byte, lim Limits) error {
	p := parser{b: body, lim: lim.withDefaults()}
	p.skipWS()
	if p.pos >= len(p.b) {
		return p.errorf("empty body")
	}
	if _, err := p.skip(1); err != nil {
		return err
	}
	p.skipWS()
	if p.pos < len(p.b) {
		return p.syntax(p.pos, "")
	}
	return nil
}
