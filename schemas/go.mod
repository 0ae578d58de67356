module corral.dev/schemas

go 1.26.8

require github.com/santhosh-tekuri/jsonschema/v6 v6.0.3

require golang.org/x/text v0.43.0
