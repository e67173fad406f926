package main

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/mintgate/mintgate/api"
)

// limitsCacheControl lets a browser and shared caches keep the limits a
// minute: they change only with the signer's configuration.
const limitsCacheControl = "public, max-age=60"

// handleLimits is GET /uploads/limits: the upload limits of the
// configuration, so that a client chooses a single PUT or a multipart
// upload, and cuts its parts, before it asks for either (Uppy's
// shouldUseMultipart and getChunkSize are synchronous). The limits are the
// same for every caller and no secret: no authentication, no Redis, one
// body built when the routes are.
func handleLimits(c cfg) echo.HandlerFunc {
	body := limitsBody(c)
	return func(ctx echo.Context) error {
		ctx.Response().Header().Set(echo.HeaderCacheControl, limitsCacheControl)
		return ctx.JSONBlob(http.StatusOK, body)
	}
}

// limitsBody is the JSON of c's limits, ending in a newline as echo's
// other answers do.
func limitsBody(c cfg) []byte {
	types := slices.Sorted(maps.Keys(c.ContentTypes))
	if types == nil {
		types = []string{} // [], not null, when MINTGATE_CONTENT_TYPES lists none
	}
	b, err := json.Marshal(api.LimitsResponse{
		MaxObjectBytes:     c.MaxObject,
		MaxMultipartBytes:  c.Multipart.MaxObject,
		PartSize:           c.Multipart.PartSize,
		MaxPartsPerRequest: maxPartsPerRequest,
		ContentTypes:       types,
		RequireChecksum:    c.RequireChecksum,
	})
	if err != nil {
		panic(err) // integers and strings always marshal
	}
	return append(b, '\n')
}
