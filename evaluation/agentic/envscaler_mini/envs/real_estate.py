import copy
import re
from typing import Optional


class PropertyListings:
    """Listings desk of a real-estate agency: agents, properties for sale (known to people by street
    address), buyers' offers and viewing appointments. Dates are 'YYYY-MM-DD'.

    Rules:
    - Offers can only be made on available properties and must be positive.
    - Accepting a pending offer puts the property under offer and rejects its other pending offers.
    - Prices can only be changed on available properties.
    - A property can have at most one viewing per day; viewings are only for available properties.
    - A listing with pending offers cannot be withdrawn; reject them first. Only withdrawn listings
      can be relisted.
    """

    def __init__(self, init_config: Optional[dict] = None):
        self.agents = {}
        self.properties = {}
        self.offers = {}
        self.viewings = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _new_id(self, prefix, table, start):
        n = start + len(table) + 1
        while f"{prefix}{n}" in table:
            n += 1
        return f"{prefix}{n}"

    def _property(self, property_id, status=None):
        prop = self.properties.get(property_id)
        if prop is None:
            return None, {"success": False, "error": f"Property id '{property_id}' not found."}
        if status is not None and prop["status"] != status:
            return None, {"success": False, "error": f"Property is {prop['status']}, not {status}."}
        return prop, None

    def _pending_offer(self, offer_id):
        offer = self.offers.get(offer_id)
        if offer is None:
            return None, {"success": False, "error": f"Offer '{offer_id}' not found."}
        if offer["status"] != "pending":
            return None, {"success": False, "error": f"Offer is already {offer['status']}."}
        return offer, None

    # -- query tools --

    def search_properties(self, city: Optional[str] = None, min_bedrooms: Optional[int] = None,
                          max_price: Optional[int] = None) -> dict:
        """Search listings (all statuses) by city, minimum bedrooms and/or maximum price.

        Args:
            city: Optional city name.
            min_bedrooms: Optional minimum number of bedrooms.
            max_price: Optional maximum asking price.
        """
        found = [{"property_id": pid, **p} for pid, p in self.properties.items()
                 if (city is None or p["city"].lower() == city.strip().lower())
                 and (min_bedrooms is None or p["bedrooms"] >= min_bedrooms)
                 and (max_price is None or p["price"] <= max_price)]
        return {"success": True, "data": found}

    def get_property_by_address(self, address: str) -> dict:
        """Look up a property by its street address (case-insensitive exact match).

        Args:
            address: Street address, e.g. '14 Birch Lane'.
        """
        for pid, prop in self.properties.items():
            if prop["address"].lower() == address.strip().lower():
                return {"success": True, "data": {"property_id": pid, **prop}}
        return {"success": False, "error": f"No property at '{address}'."}

    def list_offers(self, property_id: str) -> dict:
        """List all offers made on a property.

        Args:
            property_id: Internal property id.
        """
        if property_id not in self.properties:
            return {"success": False, "error": f"Property id '{property_id}' not found."}
        found = [{"offer_id": oid, **o} for oid, o in self.offers.items() if o["property_id"] == property_id]
        return {"success": True, "data": found}

    def list_agents(self) -> dict:
        """List the agency's agents with their ids and the properties each one handles."""
        found = [{"agent_id": aid, **a,
                  "property_ids": [pid for pid, p in self.properties.items() if p["agent_id"] == aid]}
                 for aid, a in self.agents.items()]
        return {"success": True, "data": found}

    # -- modification tools --

    def submit_offer(self, property_id: str, buyer_name: str, amount: int) -> dict:
        """Record a buyer's offer on an available property; it starts as pending.

        Args:
            property_id: Internal property id.
            buyer_name: Buyer's full name.
            amount: Offered price.
        """
        prop, error = self._property(property_id, "available")
        if error:
            return error
        if amount <= 0:
            return {"success": False, "error": "Amount must be positive."}
        offer_id = self._new_id("OF-", self.offers, 40)
        self.offers[offer_id] = {"property_id": property_id, "buyer_name": buyer_name, "amount": amount,
                                 "status": "pending"}
        return {"success": True, "data": {"offer_id": offer_id, **self.offers[offer_id]}}

    def accept_offer(self, offer_id: str) -> dict:
        """Accept a pending offer: the property goes under offer and its other pending offers are rejected.

        Args:
            offer_id: Offer id.
        """
        offer, error = self._pending_offer(offer_id)
        if error:
            return error
        prop, error = self._property(offer["property_id"], "available")
        if error:
            return error
        offer["status"] = "accepted"
        prop["status"] = "under_offer"
        rejected = []
        for oid, other in self.offers.items():
            if other["property_id"] == offer["property_id"] and other["status"] == "pending":
                other["status"] = "rejected"
                rejected.append(oid)
        return {"success": True, "data": {"offer_id": offer_id, "property_status": "under_offer",
                                          "rejected_offers": rejected}}

    def reject_offer(self, offer_id: str) -> dict:
        """Reject a pending offer.

        Args:
            offer_id: Offer id.
        """
        offer, error = self._pending_offer(offer_id)
        if error:
            return error
        offer["status"] = "rejected"
        return {"success": True, "data": {"offer_id": offer_id, **offer}}

    def update_listing_price(self, property_id: str, new_price: int) -> dict:
        """Change the asking price of an available property.

        Args:
            property_id: Internal property id.
            new_price: New asking price, positive.
        """
        prop, error = self._property(property_id, "available")
        if error:
            return error
        if new_price <= 0:
            return {"success": False, "error": "Price must be positive."}
        prop["price"] = new_price
        return {"success": True, "data": {"property_id": property_id, **prop}}

    def schedule_viewing(self, property_id: str, client_name: str, date: str) -> dict:
        """Book a viewing of an available property for a client on a day.

        Args:
            property_id: Internal property id.
            client_name: Client's full name.
            date: Day of the viewing, 'YYYY-MM-DD'.
        """
        prop, error = self._property(property_id, "available")
        if error:
            return error
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
            return {"success": False, "error": f"Date '{date}' must look like 'YYYY-MM-DD'."}
        for v in self.viewings.values():
            if v["property_id"] == property_id and v["date"] == date and v["status"] == "scheduled":
                return {"success": False, "error": f"{prop['address']} already has a viewing on {date}."}
        viewing_id = self._new_id("VW-", self.viewings, 10)
        self.viewings[viewing_id] = {"property_id": property_id, "client_name": client_name, "date": date,
                                     "status": "scheduled"}
        return {"success": True, "data": {"viewing_id": viewing_id, **self.viewings[viewing_id]}}

    def withdraw_listing(self, property_id: str) -> dict:
        """Take an available property off the market.

        Args:
            property_id: Internal property id.
        """
        prop, error = self._property(property_id, "available")
        if error:
            return error
        pending = [oid for oid, o in self.offers.items()
                   if o["property_id"] == property_id and o["status"] == "pending"]
        if pending:
            return {"success": False, "error": f"Pending offers {pending} must be rejected first."}
        prop["status"] = "withdrawn"
        return {"success": True, "data": {"property_id": property_id, "status": "withdrawn"}}

    def relist_property(self, property_id: str) -> dict:
        """Put a withdrawn property back on the market as available.

        Args:
            property_id: Internal property id.
        """
        prop, error = self._property(property_id, "withdrawn")
        if error:
            return error
        prop["status"] = "available"
        return {"success": True, "data": {"property_id": property_id, "status": "available"}}

    def reassign_agent(self, property_id: str, agent_id: str) -> dict:
        """Hand a listing over to another agent.

        Args:
            property_id: Internal property id.
            agent_id: Internal id of the new agent.
        """
        prop, error = self._property(property_id)
        if error:
            return error
        if agent_id not in self.agents:
            return {"success": False, "error": f"Agent id '{agent_id}' not found."}
        if prop["agent_id"] == agent_id:
            return {"success": False, "error": "That agent already handles this property."}
        prop["agent_id"] = agent_id
        return {"success": True, "data": {"property_id": property_id, "agent_id": agent_id}}
