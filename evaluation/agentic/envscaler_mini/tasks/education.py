"""Education: students by number, courses by code or title, then enrolment, waiting lists, grades."""

from ._common import TaskBook, call, check

ENV_CLASS = "CourseRegistrar"


def _student(name, number, max_credits, completed):
    return {"name": name, "student_number": number, "status": "active", "max_credits": max_credits,
            "completed": completed, "grades": {}}


def _course(code, title, credits, capacity, enrolled, prerequisites, waitlist=()):
    return {"code": code, "title": title, "credits": credits, "capacity": capacity, "enrolled": enrolled,
            "prerequisites": prerequisites, "waitlist": list(waitlist)}


INIT_CONFIG = {
    "students": {
        "ST-1": _student("Maya Johnson", "S2023017", 18, ["CS101", "MATH120"]),
        "ST-2": _student("Leo Dubois", "S2022044", 18, ["CS101", "CS201", "MATH120", "MATH220"]),
        "ST-3": _student("Aiko Sato", "S2024003", 12, []),
        "ST-4": _student("Tariq Hassan", "S2021090", 9, ["CS101", "CS201", "STAT200"]),
    },
    "courses": {
        "C-11": _course("CS101", "Intro to Programming", 4, 3, ["ST-3"], []),
        "C-12": _course("CS201", "Data Structures", 4, 2, ["ST-1"], ["CS101"]),
        "C-13": _course("CS310", "Algorithms", 4, 2, ["ST-2"], ["CS201", "MATH220"]),
        "C-14": _course("MATH120", "Calculus I", 4, 3, [], []),
        "C-15": _course("MATH220", "Linear Algebra", 3, 1, ["ST-4"], ["MATH120"], ["ST-3", "ST-1"]),
        "C-16": _course("STAT200", "Probability and Statistics", 3, 1, ["ST-1"], ["MATH120"]),
        "C-17": _course("HIST105", "World History", 3, 4, [], []),
    },
}

STUDENTS = INIT_CONFIG["students"]
COURSES = INIT_CONFIG["courses"]
NUMBER = {sid: s["student_number"] for sid, s in STUDENTS.items()}
NAME = {sid: s["name"] for sid, s in STUDENTS.items()}
BY_CODE = {c["code"]: cid for cid, c in COURSES.items()}


def _enrolled(sid: str, cid: str, yes: bool = True) -> dict:
    return check(f"{sid} {'' if yes else 'not '}enrolled in {cid}",
                 f"({sid!r} in s['courses'][{cid!r}]['enrolled']) is {yes}")


def _find(sid: str) -> dict:
    return call("find_student", student_number=NUMBER[sid])


def build(book: TaskBook) -> None:
    # Enrol, course given by code or by title.
    for sid, code, by_title in [("ST-1", "HIST105", False), ("ST-2", "HIST105", True), ("ST-3", "MATH120", True),
                                ("ST-3", "HIST105", False), ("ST-4", "MATH120", False), ("ST-4", "HIST105", True)]:
        cid = BY_CODE[code]
        name = f"'{COURSES[cid]['title']}'" if by_title else code
        query = COURSES[cid]["title"] if by_title else code
        book.add(f"Enroll {NAME[sid]} (student number {NUMBER[sid]}) in {name}.", [_enrolled(sid, cid)],
                 [_find(sid), call("search_courses", query=query), call("enroll_student", student_id=sid, course_id=cid)])
    book.add("Aiko Sato (S2024003) wants to take both Calculus I and World History this term. Enroll her in both.",
             [_enrolled("ST-3", "C-14"), _enrolled("ST-3", "C-17")],
             [_find("ST-3"), call("search_courses", query="Calculus I"), call("search_courses", query="World History"),
              call("enroll_student", student_id="ST-3", course_id="C-14"),
              call("enroll_student", student_id="ST-3", course_id="C-17")])

    # Full courses: waiting list.
    book.add("Leo Dubois (S2022044) wants STAT200. Enroll him, or if the course is full put him on its waiting list.",
             [check("ST-2 waiting for C-16", "s['courses']['C-16']['waitlist'] == ['ST-2']"), _enrolled("ST-2", "C-16", False)],
             [_find("ST-2"), call("search_courses", query="STAT200"), call("join_waitlist", student_id="ST-2", course_id="C-16")])
    book.add("Leo Dubois (S2022044): enroll him in World History and put him on the waiting list for STAT200, "
             "which is full.",
             [_enrolled("ST-2", "C-17"), check("ST-2 waiting for C-16", "'ST-2' in s['courses']['C-16']['waitlist']")],
             [_find("ST-2"), call("search_courses", query="World History"),
              call("enroll_student", student_id="ST-2", course_id="C-17"), call("search_courses", query="STAT200"),
              call("join_waitlist", student_id="ST-2", course_id="C-16")])
    book.add("Tariq Hassan (S2021090) is dropping MATH220. Give his seat to the first student on the MATH220 waiting "
             "list who meets its prerequisites.",
             [_enrolled("ST-4", "C-15", False), _enrolled("ST-1", "C-15"),
              check("ST-3 still waiting", "s['courses']['C-15']['waitlist'] == ['ST-3']")],
             [_find("ST-4"), call("search_courses", query="MATH220"), call("drop_course", student_id="ST-4", course_id="C-15"),
              call("get_student", student_id="ST-3"), call("get_student", student_id="ST-1"),
              call("enroll_student", student_id="ST-1", course_id="C-15")])

    # Drops and swaps.
    for sid, code in [("ST-1", "STAT200"), ("ST-2", "CS310"), ("ST-3", "CS101"), ("ST-4", "MATH220")]:
        cid = BY_CODE[code]
        book.add(f"{NAME[sid]} (student number {NUMBER[sid]}) is dropping {code}. Remove them from the course.",
                 [_enrolled(sid, cid, False)],
                 [_find(sid), call("list_enrollments", student_id=sid), call("drop_course", student_id=sid, course_id=cid)])
    for sid, old, new in [("ST-1", "STAT200", "HIST105"), ("ST-4", "MATH220", "MATH120"), ("ST-2", "CS310", "HIST105")]:
        a, b = BY_CODE[old], BY_CODE[new]
        book.add(f"{NAME[sid]} (student number {NUMBER[sid]}) wants to swap {old} for {new}.",
                 [_enrolled(sid, a, False), _enrolled(sid, b)],
                 [_find(sid), call("list_enrollments", student_id=sid), call("drop_course", student_id=sid, course_id=a),
                  call("search_courses", query=new), call("enroll_student", student_id=sid, course_id=b)])

    # Grades.
    for sid, code, grade in [("ST-1", "CS201", "A"), ("ST-2", "CS310", "B"), ("ST-3", "CS101", "F"), ("ST-4", "MATH220", "C")]:
        cid = BY_CODE[code]
        done = "in" if grade != "F" else "not in"
        book.add(f"Record a final grade of {grade} for {NAME[sid]} (student number {NUMBER[sid]}) in {code}.",
                 [check(f"{sid} has {grade} in {code}", f"s['students'][{sid!r}]['grades'].get({code!r}) == {grade!r}"),
                  check(f"{code} {done} completed courses", f"{code!r} {done} s['students'][{sid!r}]['completed']")],
                 [_find(sid), call("list_enrollments", student_id=sid),
                  call("record_grade", student_id=sid, course_id=cid, grade=grade)])
    book.add("Record Maya Johnson's (S2023017) final grades: A in Data Structures and B in Probability and Statistics.",
             [check("CS201 A", "s['students']['ST-1']['grades'].get('CS201') == 'A'"),
              check("STAT200 B", "s['students']['ST-1']['grades'].get('STAT200') == 'B'")],
             [_find("ST-1"), call("list_enrollments", student_id="ST-1"),
              call("record_grade", student_id="ST-1", course_id="C-12", grade="A"),
              call("record_grade", student_id="ST-1", course_id="C-16", grade="B")])

    # Credit overloads.
    book.add("Tariq Hassan (S2021090) wants Calculus I and World History on top of his current courses. Approve a "
             "credit overload to exactly the total he needs, then enroll him in both.",
             [check("ST-4 limit 10", "s['students']['ST-4']['max_credits'] == 10"),
              _enrolled("ST-4", "C-14"), _enrolled("ST-4", "C-17")],
             [_find("ST-4"), call("list_enrollments", student_id="ST-4"), call("search_courses", query="Calculus I"),
              call("search_courses", query="World History"),
              call("approve_credit_overload", student_id="ST-4", max_credits=10),
              call("enroll_student", student_id="ST-4", course_id="C-14"),
              call("enroll_student", student_id="ST-4", course_id="C-17")])
    for sid, limit in [("ST-1", 21), ("ST-4", 12)]:
        book.add(f"Approve a credit overload for {NAME[sid]} (student number {NUMBER[sid]}): raise their limit to {limit}.",
                 [check(f"{sid} limit {limit}", f"s['students'][{sid!r}]['max_credits'] == {limit}")],
                 [_find(sid), call("approve_credit_overload", student_id=sid, max_credits=limit)])
