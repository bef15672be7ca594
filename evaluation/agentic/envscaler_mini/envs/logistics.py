import copy
from typing import Optional


class ShipmentDispatch:
    """Dispatch desk of a parcel and freight company: warehouses, carriers and shipments. People refer
    to shipments by tracking number, to warehouses by city and to carriers by name; the tools use
    internal ids.

    Rules:
    - Shipment status moves created -> in_transit or cancelled, in_transit -> delivered or held,
      held -> in_transit or cancelled.
    - A shipment needs a carrier before it can go in transit.
    - Only created or held shipments can change carrier, warehouse or destination.
    - A carrier must be active and its max_weight_kg at least the shipment's weight.
    - Express priority is only for shipments of at most 30 kg that are not delivered or cancelled.
    """

    TRANSITIONS = {"created": ["in_transit", "cancelled"], "in_transit": ["delivered", "held"],
                   "held": ["in_transit", "cancelled"]}
    EXPRESS_MAX_KG = 30

    def __init__(self, init_config: Optional[dict] = None):
        self.warehouses = {}
        self.carriers = {}
        self.shipments = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _editable(self, shipment_id):
        shipment = self.shipments.get(shipment_id)
        if shipment is None:
            return None, {"success": False, "error": f"Shipment id '{shipment_id}' not found."}
        if shipment["status"] not in ("created", "held"):
            return None, {"success": False,
                          "error": f"Shipment is {shipment['status']}; only created or held shipments can be changed."}
        return shipment, None

    # -- query tools --

    def get_shipment(self, tracking_number: str) -> dict:
        """Look up a shipment by tracking number; returns its internal id and details.

        Args:
            tracking_number: Tracking number, e.g. 'TRK-88120'.
        """
        for sid, shipment in self.shipments.items():
            if shipment["tracking_number"] == tracking_number:
                return {"success": True, "data": {"shipment_id": sid, **shipment}}
        return {"success": False, "error": f"No shipment with tracking number '{tracking_number}'."}

    def list_shipments(self, warehouse_id: Optional[str] = None, status: Optional[str] = None) -> dict:
        """List shipments, optionally only those at one warehouse and/or with one status.

        Args:
            warehouse_id: Optional internal warehouse id.
            status: Optional status filter: created, in_transit, held, delivered or cancelled.
        """
        if warehouse_id is not None and warehouse_id not in self.warehouses:
            return {"success": False, "error": f"Warehouse id '{warehouse_id}' not found."}
        found = [{"shipment_id": sid, **s} for sid, s in self.shipments.items()
                 if (warehouse_id is None or s["warehouse_id"] == warehouse_id)
                 and (status is None or s["status"] == status)]
        return {"success": True, "data": found}

    def list_carriers(self, include_inactive: bool = False) -> dict:
        """List carriers with their ids and weight capacity.

        Args:
            include_inactive: Also list carriers that are no longer active.
        """
        found = [{"carrier_id": cid, **c} for cid, c in self.carriers.items() if include_inactive or c["active"]]
        return {"success": True, "data": found}

    def find_warehouse(self, city: str) -> dict:
        """Find the warehouse in a city.

        Args:
            city: City name.
        """
        found = [{"warehouse_id": wid, **w} for wid, w in self.warehouses.items()
                 if w["city"].lower() == city.strip().lower()]
        if not found:
            return {"success": False, "error": f"No warehouse in '{city}'."}
        return {"success": True, "data": found}

    # -- modification tools --

    def assign_carrier(self, shipment_id: str, carrier_id: str) -> dict:
        """Assign (or replace) the carrier of a created or held shipment.

        Args:
            shipment_id: Internal shipment id.
            carrier_id: Internal carrier id.
        """
        shipment, error = self._editable(shipment_id)
        if error:
            return error
        carrier = self.carriers.get(carrier_id)
        if carrier is None:
            return {"success": False, "error": f"Carrier id '{carrier_id}' not found."}
        if not carrier["active"]:
            return {"success": False, "error": f"Carrier {carrier['name']} is not active."}
        if shipment["weight_kg"] > carrier["max_weight_kg"]:
            return {"success": False, "error": f"Shipment weighs {shipment['weight_kg']} kg; "
                                               f"{carrier['name']} takes at most {carrier['max_weight_kg']} kg."}
        shipment["carrier_id"] = carrier_id
        return {"success": True, "data": {"shipment_id": shipment_id, **shipment}}

    def transfer_shipment(self, shipment_id: str, warehouse_id: str) -> dict:
        """Move a created or held shipment to another warehouse.

        Args:
            shipment_id: Internal shipment id.
            warehouse_id: Internal id of the destination warehouse.
        """
        shipment, error = self._editable(shipment_id)
        if error:
            return error
        if warehouse_id not in self.warehouses:
            return {"success": False, "error": f"Warehouse id '{warehouse_id}' not found."}
        if shipment["warehouse_id"] == warehouse_id:
            return {"success": False, "error": "Shipment is already at that warehouse."}
        shipment["warehouse_id"] = warehouse_id
        return {"success": True, "data": {"shipment_id": shipment_id, **shipment}}

    def update_status(self, shipment_id: str, new_status: str) -> dict:
        """Move a shipment to a new status (see the rules for allowed transitions).

        Args:
            shipment_id: Internal shipment id.
            new_status: in_transit, delivered, held or cancelled.
        """
        shipment = self.shipments.get(shipment_id)
        if shipment is None:
            return {"success": False, "error": f"Shipment id '{shipment_id}' not found."}
        allowed = self.TRANSITIONS.get(shipment["status"], [])
        if new_status not in allowed:
            return {"success": False,
                    "error": f"Cannot move shipment from {shipment['status']} to {new_status}; allowed: {allowed}."}
        if new_status == "in_transit" and not shipment["carrier_id"]:
            return {"success": False, "error": "Assign a carrier before dispatching."}
        shipment["status"] = new_status
        return {"success": True, "data": {"shipment_id": shipment_id, **shipment}}

    def update_destination(self, shipment_id: str, destination_city: str) -> dict:
        """Redirect a created or held shipment to another destination city.

        Args:
            shipment_id: Internal shipment id.
            destination_city: New destination city.
        """
        shipment, error = self._editable(shipment_id)
        if error:
            return error
        if not destination_city.strip():
            return {"success": False, "error": "Destination city must not be empty."}
        shipment["destination_city"] = destination_city.strip()
        return {"success": True, "data": {"shipment_id": shipment_id, **shipment}}

    def set_priority(self, shipment_id: str, priority: str) -> dict:
        """Set a shipment's priority.

        Args:
            shipment_id: Internal shipment id.
            priority: standard or express.
        """
        shipment = self.shipments.get(shipment_id)
        if shipment is None:
            return {"success": False, "error": f"Shipment id '{shipment_id}' not found."}
        if priority not in ("standard", "express"):
            return {"success": False, "error": "Priority must be standard or express."}
        if shipment["status"] in ("delivered", "cancelled"):
            return {"success": False, "error": f"Shipment is already {shipment['status']}."}
        if priority == "express" and shipment["weight_kg"] > self.EXPRESS_MAX_KG:
            return {"success": False, "error": f"Express is only for shipments up to {self.EXPRESS_MAX_KG} kg."}
        shipment["priority"] = priority
        return {"success": True, "data": {"shipment_id": shipment_id, **shipment}}
