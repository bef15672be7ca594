"""Logistics: shipments by tracking number, warehouses by city, carriers by name."""

from ._common import TaskBook, call, check

ENV_CLASS = "ShipmentDispatch"


def _shipment(tracking, recipient, city, kg, status, warehouse, carrier, priority):
    return {"tracking_number": tracking, "recipient": recipient, "destination_city": city, "weight_kg": kg,
            "status": status, "warehouse_id": warehouse, "carrier_id": carrier, "priority": priority}


INIT_CONFIG = {
    "warehouses": {
        "W-3a": {"name": "North Hub", "city": "Leeds"},
        "W-7k": {"name": "Harbour Depot", "city": "Bristol"},
        "W-5m": {"name": "Central DC", "city": "Birmingham"},
    },
    "carriers": {
        "CR-12": {"name": "SwiftVan", "max_weight_kg": 500, "active": True},
        "CR-34": {"name": "HeavyHaul", "max_weight_kg": 5000, "active": True},
        "CR-56": {"name": "BikeDrop", "max_weight_kg": 20, "active": True},
        "CR-78": {"name": "OldRoad Freight", "max_weight_kg": 3000, "active": False},
    },
    "shipments": {
        "SH-104": _shipment("TRK-88120", "Dana Whitfield", "York", 12.5, "created", "W-3a", None, "standard"),
        "SH-117": _shipment("TRK-88145", "Priya Natarajan", "Bath", 840, "created", "W-7k", None, "standard"),
        "SH-122": _shipment("TRK-88163", "Owen Hughes", "Coventry", 3.2, "in_transit", "W-5m", "CR-56", "express"),
        "SH-130": _shipment("TRK-88177", "Lena Fischer", "Hull", 260, "held", "W-3a", "CR-12", "standard"),
        "SH-138": _shipment("TRK-88190", "Marco Rossi", "Cardiff", 18, "created", "W-7k", None, "standard"),
        "SH-141": _shipment("TRK-88204", "Grace Liu", "Oxford", 1900, "in_transit", "W-5m", "CR-34", "standard"),
        "SH-150": _shipment("TRK-88219", "Sam O'Neil", "Derby", 45, "delivered", "W-5m", "CR-12", "standard"),
    },
}

SHIPMENT = {s["tracking_number"]: sid for sid, s in INIT_CONFIG["shipments"].items()}
CARRIER = {c["name"]: cid for cid, c in INIT_CONFIG["carriers"].items()}
WAREHOUSE = {w["city"]: wid for wid, w in INIT_CONFIG["warehouses"].items()}


def _field(sid: str, key: str) -> str:
    return f"s['shipments'][{sid!r}][{key!r}]"


def build(book: TaskBook) -> None:
    # Assign a named carrier and dispatch.
    for trk, carrier in [("TRK-88120", "BikeDrop"), ("TRK-88145", "HeavyHaul"), ("TRK-88190", "SwiftVan")]:
        sid, cid = SHIPMENT[trk], CARRIER[carrier]
        book.add(f"Shipment {trk} is packed. Give it to carrier {carrier} and mark it as in transit.",
                 [check(f"{trk} carried by {carrier}", f"{_field(sid, 'carrier_id')} == {cid!r}"),
                  check(f"{trk} in transit", f"{_field(sid, 'status')} == 'in_transit'")],
                 [call("get_shipment", tracking_number=trk), call("list_carriers"),
                  call("assign_carrier", shipment_id=sid, carrier_id=cid),
                  call("update_status", shipment_id=sid, new_status="in_transit")])

    # Pick the smallest active carrier that can take the weight (no dispatch).
    for trk in ["TRK-88120", "TRK-88190", "TRK-88145"]:
        sid = SHIPMENT[trk]
        kg = INIT_CONFIG["shipments"][sid]["weight_kg"]
        fits = [(c["max_weight_kg"], cid) for cid, c in INIT_CONFIG["carriers"].items()
                if c["active"] and c["max_weight_kg"] >= kg]
        cid = min(fits)[1]
        book.add(f"Assign shipment {trk} to the active carrier with the smallest weight capacity that can "
                 f"still carry it. Do not dispatch it yet.",
                 [check(f"{trk} carrier is {cid}", f"{_field(sid, 'carrier_id')} == {cid!r}"),
                  check(f"{trk} still created", f"{_field(sid, 'status')} == 'created'")],
                 [call("get_shipment", tracking_number=trk), call("list_carriers"),
                  call("assign_carrier", shipment_id=sid, carrier_id=cid)])

    # Move to the warehouse of another city.
    for trk, city in [("TRK-88120", "Birmingham"), ("TRK-88145", "Leeds"), ("TRK-88177", "Bristol"),
                      ("TRK-88190", "Birmingham"), ("TRK-88145", "Birmingham")]:
        sid, wid = SHIPMENT[trk], WAREHOUSE[city]
        book.add(f"Move shipment {trk} to our warehouse in {city}.",
                 [check(f"{trk} at the {city} warehouse", f"{_field(sid, 'warehouse_id')} == {wid!r}")],
                 [call("get_shipment", tracking_number=trk), call("find_warehouse", city=city),
                  call("transfer_shipment", shipment_id=sid, warehouse_id=wid)])

    # Redirect: in-transit shipments must be held first.
    for trk, city in [("TRK-88163", "Warwick"), ("TRK-88204", "Swindon")]:
        sid = SHIPMENT[trk]
        book.add(f"The recipient of shipment {trk} has moved. Stop the shipment (put it on hold) and "
                 f"redirect it to {city}.",
                 [check(f"{trk} held", f"{_field(sid, 'status')} == 'held'"),
                  check(f"{trk} goes to {city}", f"{_field(sid, 'destination_city')} == {city!r}")],
                 [call("get_shipment", tracking_number=trk),
                  call("update_status", shipment_id=sid, new_status="held"),
                  call("update_destination", shipment_id=sid, destination_city=city)])
    for trk, city in [("TRK-88120", "Scarborough"), ("TRK-88190", "Newport"), ("TRK-88145", "Swansea")]:
        sid = SHIPMENT[trk]
        book.add(f"Change the destination of shipment {trk} to {city}.",
                 [check(f"{trk} goes to {city}", f"{_field(sid, 'destination_city')} == {city!r}")],
                 [call("get_shipment", tracking_number=trk),
                  call("update_destination", shipment_id=sid, destination_city=city)])

    # Release the held shipment, with or without a new carrier.
    sid = SHIPMENT["TRK-88177"]
    book.add("Customs cleared shipment TRK-88177. Put it back in transit with its current carrier.",
             [check("TRK-88177 in transit", f"{_field(sid, 'status')} == 'in_transit'"),
              check("TRK-88177 carrier unchanged", f"{_field(sid, 'carrier_id')} == 'CR-12'")],
             [call("get_shipment", tracking_number="TRK-88177"),
              call("update_status", shipment_id=sid, new_status="in_transit")])
    book.add("Shipment TRK-88177 is on hold. Switch it to carrier HeavyHaul and then resume transit.",
             [check("TRK-88177 carried by HeavyHaul", f"{_field(sid, 'carrier_id')} == 'CR-34'"),
              check("TRK-88177 in transit", f"{_field(sid, 'status')} == 'in_transit'")],
             [call("get_shipment", tracking_number="TRK-88177"), call("list_carriers"),
              call("assign_carrier", shipment_id=sid, carrier_id="CR-34"),
              call("update_status", shipment_id=sid, new_status="in_transit")])

    # Deliver, cancel, upgrade.
    for trk in ["TRK-88163", "TRK-88204"]:
        sid = SHIPMENT[trk]
        book.add(f"The driver confirmed the drop-off of shipment {trk}. Record it as delivered.",
                 [check(f"{trk} delivered", f"{_field(sid, 'status')} == 'delivered'")],
                 [call("get_shipment", tracking_number=trk),
                  call("update_status", shipment_id=sid, new_status="delivered")])
    for trk in ["TRK-88145", "TRK-88177"]:
        sid = SHIPMENT[trk]
        book.add(f"The sender withdrew shipment {trk}. Cancel it.",
                 [check(f"{trk} cancelled", f"{_field(sid, 'status')} == 'cancelled'")],
                 [call("get_shipment", tracking_number=trk),
                  call("update_status", shipment_id=sid, new_status="cancelled")])
    for trk in ["TRK-88190", "TRK-88120"]:
        sid = SHIPMENT[trk]
        book.add(f"The sender paid for faster delivery: upgrade shipment {trk} to express.",
                 [check(f"{trk} express", f"{_field(sid, 'priority')} == 'express'")],
                 [call("get_shipment", tracking_number=trk),
                  call("set_priority", shipment_id=sid, priority="express")])

    # Warehouse-wide operations.
    book.add("Every shipment that left the Birmingham warehouse and is still in transit has arrived. "
             "Mark all of them delivered.",
             [check("SH-122 delivered", f"{_field('SH-122', 'status')} == 'delivered'"),
              check("SH-141 delivered", f"{_field('SH-141', 'status')} == 'delivered'")],
             [call("find_warehouse", city="Birmingham"),
              call("list_shipments", warehouse_id="W-5m", status="in_transit"),
              call("update_status", shipment_id="SH-122", new_status="delivered"),
              call("update_status", shipment_id="SH-141", new_status="delivered")])
    book.add("At the Bristol warehouse, assign carrier HeavyHaul to every shipment that has no carrier yet.",
             [check("SH-117 carried by HeavyHaul", f"{_field('SH-117', 'carrier_id')} == 'CR-34'"),
              check("SH-138 carried by HeavyHaul", f"{_field('SH-138', 'carrier_id')} == 'CR-34'")],
             [call("find_warehouse", city="Bristol"), call("list_shipments", warehouse_id="W-7k"),
              call("list_carriers"),
              call("assign_carrier", shipment_id="SH-117", carrier_id="CR-34"),
              call("assign_carrier", shipment_id="SH-138", carrier_id="CR-34")])
