package httpapi

import "github.com/fasthttp/router"

// rpcRoutes registers server-side RPC: REST calls to devices, the device's RPC poll and replies, persistent RPC (compat §2).
func (s *Server) rpcRoutes(r *router.Router) {}
