package wire

// Budget is a session's spend ceiling as the API shows and takes it:
//
//	{"type": "limit", "max_list_cost": {"amount": "2500", "currency": "USD"}}
//
// Amount is in minor units of the currency ("2500" is $25.00).
type Budget struct {
	Type        string `json:"type"`
	MaxListCost Money  `json:"max_list_cost"`
}

// BudgetType is the one type of [Budget].
const BudgetType = "limit"
